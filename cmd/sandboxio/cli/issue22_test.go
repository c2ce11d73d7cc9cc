package cli

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sandboxio/sandboxio/internal/natsconn"
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
