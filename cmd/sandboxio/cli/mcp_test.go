package cli

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// binary builds cmd/sandboxio into the test's directory (the build cache
// makes it cheap after the first build) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sandboxio")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sandboxio/sandboxio/cmd/sandboxio").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// TestMCPThroughTheBinary: an MCP host starts `sandboxio mcp` (stdio) or
// reaches `sandboxio mcp --http` against `sandboxio dev`; the go-sdk
// client creates a sandbox, runs a command in it, and the sandbox is gone
// once the session ends.
func TestMCPThroughTheBinary(t *testing.T) {
	bin := binary(t)
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "1"}, nil)
			var tr mcp.Transport
			var server *exec.Cmd
			switch transport {
			case "stdio":
				server = exec.Command(bin, "--nats", dev.URL, "--log-level", "error", "mcp", "--class", "fake")
				tr = &mcp.CommandTransport{Command: server}
			case "http":
				addr := freeAddr(t)
				server = exec.CommandContext(ctx, bin, "--nats", dev.URL, "mcp", "--class", "fake", "--http", addr)
				stderr, err := server.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := server.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
				waitFor(t, stderr, "mcp serving streamable HTTP")
				tr = &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}
			}
			cs, err := client.Connect(ctx, tr, nil)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			text, isErr := mcpCall(t, cs, "create_sandbox", map[string]any{"lifetime": "10m"})
			if isErr {
				t.Fatalf("create_sandbox: %s", text)
			}
			id := strings.TrimSpace(strings.SplitN(strings.SplitN(text, "sandbox_id: ", 2)[1], "\n", 2)[0])
			if text, isErr := mcpCall(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"echo", "via", transport}}); isErr || !strings.Contains(text, "via "+transport) {
				t.Fatalf("run_command: %s", text)
			}
			if err := cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			poll.Eventually(t, 20*time.Second, func() error {
				r := cli(t, dev.URL, "get", "--format", "{{.State}}", id)
				if strings.TrimSpace(r.stdout) != string(events.StateGone) && !strings.Contains(r.stderr, "SBX_E1201") {
					return errString("sandbox still " + r.stdout + r.stderr)
				}
				return nil
			})
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// waitFor reads r until a line contains want (bounded by the caller's
// process context), then drains the rest in the background.
func waitFor(t *testing.T, r io.Reader, want string) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), want) {
				seen = true
				found <- true
			}
		}
		if !seen {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("the server ended before it said %q", want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the server never said %q", want)
	}
}
