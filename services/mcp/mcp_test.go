package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	mcpserver "github.com/sandboxio/sandboxio/services/mcp"
)

// transports names the two ways a host reaches the server.
var transports = []string{"stdio", "http"}

// system is a running sandboxio (fake backend) with an MCP server on one
// transport; connect opens a client session on it.
type system struct {
	env     *sbxtest.Env
	connect func(t *testing.T) *mcp.ClientSession
}

func start(t *testing.T, transport string, tweak ...func(*mcpserver.Config)) *system {
	t.Helper()
	return startOn(t, sbxtest.Options{}, transport, tweak...)
}

// startOn is start on a sandboxio started with opts.
func startOn(t *testing.T, opts sbxtest.Options, transport string, tweak ...func(*mcpserver.Config)) *system {
	t.Helper()
	env := sbxtest.Start(t, opts)
	cfg := mcpserver.Config{Client: env.Client, KillGrace: 5 * time.Second, MaxOutputBytes: 1024}
	for _, f := range tweak {
		f(&cfg)
	}
	sys := &system{env: env}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mcp server Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("mcp server did not stop within 20s")
		}
	})
	switch transport {
	case "stdio":
		// One session, as a host that spawns `sandboxio mcp` has: the
		// server reads the client's writes and the client the server's.
		toServer, clientOut := io.Pipe()
		toClient, serverOut := io.Pipe()
		cfg.Stdin, cfg.Stdout = toServer, serverOut
		srv, err := mcpserver.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- srv.Run(ctx) }()
		used := false
		sys.connect = func(t *testing.T) *mcp.ClientSession {
			if used {
				t.Fatal("stdio has one session")
			}
			used = true
			return connect(t, &mcp.IOTransport{Reader: toClient, Writer: clientOut})
		}
	case "http":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = l
		srv, err := mcpserver.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- srv.Run(ctx) }()
		url := "http://" + l.Addr().String() + "/mcp"
		sys.connect = func(t *testing.T) *mcp.ClientSession {
			return connect(t, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1})
		}
	}
	return sys
}

func connect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "sandboxio-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and returns its result and its text content.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

// ok calls a tool that must succeed and returns its text.
func ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, text := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, text)
	}
	return text
}

// fails calls a tool that must fail with code and returns its text.
func fails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, code events.Code) string {
	t.Helper()
	res, text := call(t, cs, name, args)
	if !res.IsError || !strings.Contains(text, string(code)) || !strings.Contains(text, "retryable:") {
		t.Fatalf("%s(%v) = error %v %q, want a tool error with %s and whether to retry", name, args, res.IsError, text, code)
	}
	return text
}

func sandboxID(t *testing.T, text string) string {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if id, found := strings.CutPrefix(line, "sandbox_id: "); found {
			return id
		}
	}
	t.Fatalf("no sandbox_id in %q", text)
	return ""
}

// TestTools drives every tool through the go-sdk client on both
// transports, as an agent would.
func TestTools(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sys := start(t, tr)
			cs := sys.connect(t)
			ctx := context.Background()
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"create_sandbox": true, "run_command": true, "command_status": true, "run_code": true,
				"write_file": true, "read_file": true, "list_files": true, "set_timeout": true, "list_sandboxes": true, "kill_sandbox": true,
				"expose_port": true, "pause_sandbox": true, "resume_sandbox": true, "snapshot_sandbox": true}
			for _, tl := range tools.Tools {
				delete(want, tl.Name)
			}
			if len(want) > 0 {
				t.Fatalf("tools missing: %v", want)
			}

			id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
			if got := ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"echo", "hello", "agent"}}); !strings.Contains(got, "exit_code: 0") || !strings.Contains(got, "hello agent") {
				t.Errorf("run_command: %q", got)
			}
			if got := ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"exit", "3"}}); !strings.Contains(got, "exit_code: 3") {
				t.Errorf("non-zero exit is a result: %q", got)
			}
			// The fake backend has no sh: the shell form fails as a command
			// that cannot start would, with its code.
			fails(t, cs, "run_command", map[string]any{"sandbox_id": id, "command": "echo hi"}, events.CodeExecFailed)
			fails(t, cs, "run_command", map[string]any{"sandbox_id": id}, events.CodeMissingField)
			fails(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"echo"}, "timeout": "soon"}, events.CodeInvalidValue)
			if got := fails(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"sleep", "60000"}, "timeout": "300ms"}, events.CodeExecutionTimeout); !strings.Contains(got, "retryable: no") {
				t.Errorf("timeout: %q", got)
			}
			// Long output: head and tail, with how much was cut.
			got := ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"write", "100000"}})
			if !strings.Contains(got, "bytes cut here (100000 in all") || len(got) > 4000 {
				t.Errorf("long output not cut (%d bytes): %.300q", len(got), got)
			}

			// Files: text, a large binary file (through the parts path), an
			// image, a listing, a missing file.
			ok(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/work/notes.txt", "content": "first line\nsecond line\n"})
			if got := ok(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/work/notes.txt"}); !strings.Contains(got, "second line") {
				t.Errorf("read_file text: %q", got)
			}
			big := bytes.Repeat([]byte{0, 0xff, 7, 0x80}, 200<<10) // 800 KiB, more than one request
			ok(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/work/big.bin", "content": base64.StdEncoding.EncodeToString(big), "encoding": "base64"})
			if back, err := sys.env.Client.ReadFile(ctx, id, "/work/big.bin"); err != nil || !bytes.Equal(back, big) {
				t.Errorf("large binary write: %d bytes back, %v", len(back), err)
			}
			huge := bytes.Repeat([]byte("0123456789abcdef"), 5<<16) // 5 MiB: more than the go-sdk's default HTTP body bound
			ok(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/work/huge.txt", "content": string(huge)})
			if back, err := sys.env.Client.ReadFile(ctx, id, "/work/huge.txt"); err != nil || !bytes.Equal(back, huge) {
				t.Errorf("5 MiB write: %d bytes back, %v", len(back), err)
			}
			fails(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/work/big.bin"}, events.CodeInvalidValue) // too much to show as base64
			got = ok(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/work/big.bin", "offset": 4, "length": 8})
			if !strings.Contains(got, base64.StdEncoding.EncodeToString(big[4:12])) {
				t.Errorf("read_file of a binary part: %q", got)
			}
			png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 64)...)
			ok(t, cs, "write_file", map[string]any{"sandbox_id": id, "path": "/work/plot.png", "content": base64.StdEncoding.EncodeToString(png), "encoding": "base64"})
			res, _ := call(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/work/plot.png"})
			if img := imageOf(res); img == nil || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
				t.Errorf("read_file of a PNG is no image content: %+v", res.Content)
			}
			if got := ok(t, cs, "list_files", map[string]any{"sandbox_id": id, "path": "/work"}); !strings.Contains(got, "notes.txt") || !strings.Contains(got, "-rw-r--r--") {
				t.Errorf("list_files: %q", got)
			}
			fails(t, cs, "read_file", map[string]any{"sandbox_id": id, "path": "/work/nope.txt"}, events.CodeFileNotFound)

			if got := ok(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "print(6*7)"}); !strings.Contains(got, "exit_code: 0") || !strings.Contains(got, "print(6*7)") {
				t.Errorf("run_code: %q", got)
			}
			if got := ok(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "raise"}); !strings.Contains(got, "exception RuntimeError") {
				t.Errorf("run_code exception: %q", got)
			}

			// Background: a handle at once, the output and exit later.
			got = ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"drip", "3", "20"}, "background": true})
			pid := strings.Fields(strings.SplitN(got, "process_id ", 2)[1])[0]
			got = ok(t, cs, "command_status", map[string]any{"sandbox_id": id, "process_id": pid, "wait": "10s"})
			if !strings.Contains(got, "state: exited") || !strings.Contains(got, "exit_code: 0") {
				t.Errorf("command_status: %q", got)
			}
			fails(t, cs, "command_status", map[string]any{"sandbox_id": id, "process_id": pid}, events.CodeProcessNotFound) // read once finished

			if got := ok(t, cs, "set_timeout", map[string]any{"sandbox_id": id, "lifetime": "10m"}); !strings.Contains(got, "in 10m0s") {
				t.Errorf("set_timeout: %q", got)
			}
			if got := ok(t, cs, "list_sandboxes", nil); !strings.Contains(got, id) || !strings.Contains(got, "state=running") {
				t.Errorf("list_sandboxes: %q", got)
			}
			ok(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id})
			fails(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"echo"}}, events.CodeSandboxNotFound)
			fails(t, cs, "create_sandbox", map[string]any{"class": "nope"}, events.CodeUnknownClass)
		})
	}
}

func imageOf(res *mcp.CallToolResult) *mcp.ImageContent {
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			return img
		}
	}
	return nil
}

// TestSessionEndKillsItsSandboxes: when a session ends, its sandboxes are
// killed (within the grace), and another session cannot use them.
func TestSessionEndKillsItsSandboxes(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sys := start(t, tr)
			cs := sys.connect(t)
			a := sandboxID(t, ok(t, cs, "create_sandbox", nil))
			b := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": "1h"}))
			ok(t, cs, "run_command", map[string]any{"sandbox_id": a, "argv": []string{"sleep", "600000"}, "background": true})
			if tr == "http" {
				other := sys.connect(t)
				fails(t, other, "run_command", map[string]any{"sandbox_id": a, "argv": []string{"echo"}}, events.CodeSandboxNotFound)
				fails(t, other, "kill_sandbox", map[string]any{"sandbox_id": b}, events.CodeSandboxNotFound)
			}
			if err := cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			poll.Eventually(t, 15*time.Second, func() error {
				for _, id := range []string{a, b} {
					sb, err := sys.env.Client.Get(context.Background(), id)
					if err == nil && sb.State != events.StateGone {
						return errors.New(id + " still " + string(sb.State))
					}
				}
				return nil
			})
		})
	}
}
