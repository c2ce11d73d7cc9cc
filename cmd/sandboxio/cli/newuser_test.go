package cli

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
	mcpserver "github.com/sandboxio/sandboxio/services/mcp"
)

// TestExitForAuthorization: a server that refuses the credentials is not a
// usage error: it exits 77 (sysexits EX_NOPERM), and says so (issue 22,
// D.20).
func TestExitForAuthorization(t *testing.T) {
	var buf bytes.Buffer
	err := fmt.Errorf("%w: nats://x refused tenant (wrong, expired or revoked credentials?): nats: Authorization Violation", natsconn.ErrAuthorization)
	if got := exitFor("sbx", &buf, err); got != exitNoPerm || exitNoPerm != 77 {
		t.Errorf("authorization violation: exit %d, want 77 (%s)", got, buf.String())
	}
	if !strings.Contains(buf.String(), "credentials") {
		t.Errorf("the message does not name the credentials: %q", buf.String())
	}
}

// needDocker skips the test without a Docker daemon.
func needDocker(t *testing.T) {
	t.Helper()
	docker, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	defer docker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := docker.Ping(ctx); err != nil {
		t.Skipf("no docker daemon: %v", err)
	}
}

// TestDockerCannotRun: on the Docker backend (through the sandbox's agent),
// a command that exists but cannot be run (a directory, a file without
// the execute bit) exits 126 and one that does not exist 127, and the
// error keeps its words: "permission denied" is no credential (issue 22,
// D.20).
func TestDockerCannotRun(t *testing.T) {
	needDocker(t)
	dev := startDev(t, "--backends", "docker")
	dev.waitLive(t, "docker", "")
	r := cli(t, dev.URL, "create", "-q", "--class", "standard", "--lifetime", "5m")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	defer cli(t, dev.URL, "kill", id)
	for _, tc := range []struct {
		cmd  string
		want int
		says string
	}{
		{"/etc", exitNotExecutable, "permission denied"},
		{"/etc/passwd", exitNotExecutable, "/etc/passwd: permission denied"},
		{"/no/such/program", exitNotFound, "no such file"},
		{"nosuchprogram", exitNotFound, "not found"},
	} {
		r := cli(t, dev.URL, "exec", id, tc.cmd)
		if r.code != tc.want || !strings.Contains(r.stderr, tc.says) || !strings.Contains(r.stderr, "SBX_E1303") {
			t.Errorf("exec %s: exit %d, want %d, with %q: %s", tc.cmd, r.code, tc.want, tc.says, r.stderr)
		}
	}
}

// exitConstants reads the exit-code constants (exitXxx = N) of
// exitcodes.go.
func exitConstants(t *testing.T) map[int]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "exitcodes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "exit") {
					v, _ := strconv.Atoi(lit.Value)
					out[v] = n.Name
				}
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("only %d exit constants found in exitcodes.go", len(out))
	}
	return out
}

// TestREADMEExitCodes: the README's list of exit codes is the code's: every
// constant of exitcodes.go is in it, and it names no other code (issue 22,
// D.23).
func TestREADMEExitCodes(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(strings.Join(strings.Fields(string(b)), " "), "Exit codes: ")
	if !ok {
		t.Fatal("README has no \"Exit codes: \" sentence")
	}
	list, _, _ := strings.Cut(rest, ". ")
	inDoc := map[int]bool{}
	for _, m := range regexp.MustCompile(`\b(\d+)\b`).FindAllString(regexp.MustCompile("`[^`]*`").ReplaceAllString(list, ""), -1) {
		n, _ := strconv.Atoi(m)
		inDoc[n] = true
	}
	consts := exitConstants(t)
	for n, name := range consts {
		if !inDoc[n] {
			t.Errorf("README's exit codes lack %d (%s): %q", n, name, list)
		}
	}
	for n := range inDoc {
		if _, ok := consts[n]; !ok {
			t.Errorf("README names exit code %d, which the CLI does not have: %q", n, list)
		}
	}
}

// plotPy is python whose value is an image (a 1×1 PNG) with a text form.
const plotPy = `import base64
class P:
    def _repr_png_(self):
        return base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
P()
`

// TestDockerRichResults: on Docker, `run-code` saves an image result to a
// file and says where, and the MCP server's run_code without a context
// returns the value and the image, as it does with one (issue 22, D.21).
func TestDockerRichResults(t *testing.T) {
	needDocker(t)
	dev := startDev(t, "--backends", "docker")
	dev.waitLive(t, "docker", "")
	r := cli(t, dev.URL, "create", "-q", "--class", "standard", "--lifetime", "5m")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	defer cli(t, dev.URL, "kill", id)

	t.Run("run-code saves an image", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "plot.py")
		if err := os.WriteFile(src, []byte(plotPy), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "images")
		r := cli(t, dev.URL, "run-code", "--context", "c1", "--images", out, id, src)
		saved := filepath.Join(out, "result-1.png")
		b, err := os.ReadFile(saved)
		if r.code != 0 || err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) || !strings.Contains(r.stderr, saved) {
			t.Errorf("run-code with an image result: %+v, file %v", r, err)
		}
	})

	t.Run("mcp run_code without a context", func(t *testing.T) {
		cl, err := client.Connect(dev.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		toServer, clientOut := io.Pipe()
		toClient, serverOut := io.Pipe()
		srv, err := mcpserver.New(mcpserver.Config{Client: cl, KillGrace: 5 * time.Second, Stdin: toServer, Stdout: serverOut})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		defer func() {
			cancel()
			_ = clientOut.Close()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("the mcp server did not stop within 20s")
			}
		}()
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(cctx, &mcp.IOTransport{Reader: toClient, Writer: clientOut}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		text, _ := mcpCall(t, cs, "create_sandbox", map[string]any{"lifetime": 300})
		_, sid, _ := strings.Cut(text, "sandbox_id: ")
		sid, _, _ = strings.Cut(sid, "\n")
		// docs/agents.md's example of a tool error is what read_file of a
		// missing file answers, line for line.
		doc, err := os.ReadFile("../../../docs/agents.md")
		if err != nil {
			t.Fatal(err)
		}
		_, block, _ := strings.Cut(string(doc), "carries the same as fields:\n\n```\n")
		block, _, _ = strings.Cut(block, "```")
		if text, isErr := mcpCall(t, cs, "read_file", map[string]any{"sandbox_id": sid, "path": "/work/result.txt"}); !isErr || text != block {
			t.Errorf("read_file of a missing file answers %q; docs/agents.md shows %q", text, block)
		}
		for _, context := range []string{"", "c1"} {
			args := map[string]any{"sandbox_id": sid, "code": "6*7"}
			if context != "" {
				args["context"] = context
			}
			if text, isErr := mcpCall(t, cs, "run_code", args); isErr || !strings.Contains(text, "result: 42") {
				t.Errorf("run_code 6*7 (context %q): %q", context, text)
			}
			args["code"] = plotPy
			res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "run_code", Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			var png bool
			for _, c := range res.Content {
				if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" && bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
					png = true
				}
			}
			if res.IsError || !png {
				t.Errorf("run_code of an image (context %q): no PNG in %d contents", context, len(res.Content))
			}
		}
	})
}

// TestExecCountsNoRouterError: a streamed exec, with stdin piped and no
// -i, is no error to the router: the client probed the new process with
// an empty stdin write (the attach check for a process nobody started),
// which the router answered SBX_E1007 and counted in
// sandboxio_router_errors_total (issue 22, D.22).
func TestExecCountsNoRouterError(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("SBX_METRICS_ADDR", addr)
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)
	if r := cliIn(t, dev.URL, []byte("piped\n"), "exec", id, "sleep", "200"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	if r := cli(t, dev.URL, "run", "--class", "fake", "sleep", "200"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "sandboxio_router_errors_total{") {
			t.Errorf("the router counted an error: %s", line)
		}
	}
	if !strings.Contains(string(body), `sandboxio_router_calls_total{op="exec"}`) {
		t.Fatalf("no exec calls counted: the metrics are not the router's? %.500s", body)
	}
}

// TestHelpFormatExamples: every '{{…}}' example in a command's help runs
// as given against dev and prints something, and --format table prints a
// table (not JSON) for every command that takes --format (issue 22, D.22;
// `backends --format '{{.SandboxID}}'` failed).
func TestHelpFormatExamples(t *testing.T) {
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)
	// The arguments each command that prints records needs.
	argsOf := map[string][]string{
		"ls": nil, "get": {id}, "backends": nil, "quota": nil,
		"create": {"--class", "fake", "--lifetime", "60"},
	}
	root := cli(t, dev.URL, "--help")
	_, list, _ := strings.Cut(root.stdout, "Available Commands:")
	list, _, _ = strings.Cut(list, "\n\n")
	example := regexp.MustCompile(`'(\{\{[^']*\}\})'`)
	withFormat := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		name := strings.Fields(line)[0]
		help := cli(t, dev.URL, name, "--help")
		if !strings.Contains(help.stdout, "--format") || strings.Contains(help.stdout, "Available Commands:") {
			continue
		}
		withFormat++
		args, ok := argsOf[name]
		if !ok {
			t.Errorf("%s takes --format: give its arguments to this test", name)
			continue
		}
		examples := example.FindAllStringSubmatch(help.stdout, -1)
		if len(examples) == 0 {
			t.Errorf("%s --help has no --format example", name)
		}
		for _, m := range examples {
			r := cli(t, dev.URL, append([]string{name, "--format", m[1]}, args...)...)
			if r.code != 0 || strings.TrimSpace(r.stdout) == "" || strings.Contains(r.stdout, "<no value>") {
				t.Errorf("%s --format '%s' (its help's example): %+v", name, m[1], r)
			}
			if name == "create" {
				cli(t, dev.URL, "kill", strings.TrimSpace(r.stdout))
			}
		}
		r := cli(t, dev.URL, append([]string{name, "--format", "table"}, args...)...)
		if r.code != 0 || strings.HasPrefix(strings.TrimSpace(r.stdout), "{") || !strings.Contains(r.stdout, "  ") {
			t.Errorf("%s --format table is no table: %+v", name, r)
		}
		if name == "create" {
			if f := strings.Fields(strings.SplitN(r.stdout, "\n", 3)[1]); len(f) > 0 {
				cli(t, dev.URL, "kill", f[0])
			}
		}
	}
	if withFormat < len(argsOf) {
		t.Errorf("only %d commands take --format; this test names %d", withFormat, len(argsOf))
	}
}

// TestNoProcessLineForNothing: exec and run name a process (for attach)
// only once it started: not for a sandbox that does not exist, nor for a
// command refused before it started (issue 22, D.22).
func TestNoProcessLineForNothing(t *testing.T) {
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	for _, args := range [][]string{
		{"exec", "no-such-sandbox", "echo", "hi"},
		{"exec", "--buffered", "no-such-sandbox", "echo", "hi"},
		{"run", "--class", "nope", "echo", "hi"},
	} {
		r := cli(t, dev.URL, args...)
		if r.code == 0 || processLine.MatchString(r.stderr) {
			t.Errorf("%v: exit %d, and a process named: %s", args, r.code, r.stderr)
		}
	}
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)
	if r := cli(t, dev.URL, "exec", id, "echo", "hi"); r.code != 0 || processLine.FindStringSubmatch(r.stderr) == nil {
		t.Errorf("exec of a command that runs does not name its process: %+v", r)
	}
}

// TestDockerDocDefaultAllowlist: docs/backends/docker.md's default image
// allowlist is dockerworker.BuiltImages (it lacked sandboxio/python-data;
// issue 22, D.23).
func TestDockerDocDefaultAllowlist(t *testing.T) {
	b, err := os.ReadFile("../../../docs/backends/docker.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `Images` |") {
			row = line
		}
	}
	_, list, ok := strings.Cut(row, "`BuiltImages` (")
	list, _, _ = strings.Cut(list, ")")
	if !ok {
		t.Fatalf("docs/backends/docker.md has no `Images` row naming BuiltImages: %q", row)
	}
	var inDoc []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(list, -1) {
		inDoc = append(inDoc, m[1])
	}
	if strings.Join(inDoc, " ") != strings.Join(dockerworker.BuiltImages, " ") {
		t.Errorf("docs/backends/docker.md's default allowlist is %v; the code's (BuiltImages) is %v", inDoc, dockerworker.BuiltImages)
	}
}

// TestOTLPErrorsThroughSlog: an OTLP export that fails is logged through
// the command's slog logger (level, JSON when --log-json), not by
// OpenTelemetry's default, the standard library's log on the process's
// stderr (issue 22, D.22).
func TestOTLPErrorsThroughSlog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+freeAddr(t)) // nothing listens
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	dev := startDev(t, "--backends", "fake", "--log-json")
	dev.waitLive(t, "fake", "")
	deadline := time.Now().Add(45 * time.Second)
	for {
		cli(t, dev.URL, "run", "--class", "fake", "echo", "span") // spans to export
		var found bool
		for _, line := range strings.Split(dev.Err.String(), "\n") {
			if strings.HasPrefix(line, "{") && strings.Contains(line, `"msg":"opentelemetry`) {
				found = true
			}
		}
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no OTLP export error in dev's slog output within 45s: %.2000s", dev.Err.String())
		}
		time.Sleep(200 * time.Millisecond) // polling dev's log, with a deadline
	}
}

// TestDemoInterrupted: a demo interrupted while its command runs kills its
// sandbox through its own router, which still runs (it printed a false
// SBX_E1601: the router had stopped with the signal first), exits 130 and
// leaves no temporary directory (issue 22, D.22).
func TestDemoInterrupted(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb sbxtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "sandboxio", []string{"demo", "--backends", "fake", "--", "sleep", "60000"}, &out, &errb)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(errb.String(), "running ") {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the demo never ran its command: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the demo's narration, with a deadline
	}
	cancel() // what SIGINT does (signalContext)
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not end within 60s of the interrupt")
	}
	if code != exitCancelled || strings.Contains(errb.String(), "SBX_E") || !strings.Contains(errb.String(), " gone") {
		t.Errorf("interrupted demo: exit %d, stderr %s", code, errb.String())
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the demo left %d entries in TMPDIR: %v", len(left), left[0].Name())
	}
}
