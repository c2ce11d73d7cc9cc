package cli

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestVersion: `sandboxio version` says the module, the revision, the Go
// version and whether sbx-agent is beside the binary (a test binary has
// none beside it).
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), "sandboxio", []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"module    github.com/sandboxio/sandboxio", "revision  ", "go        " + runtime.Version(),
		"sbx-agent not found", "CGO_ENABLED=0 go build -o "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBackendsTableExecPath: the workers' table says how each runs execs.
func TestBackendsTableExecPath(t *testing.T) {
	var out bytes.Buffer
	backendsTable(&out, &events.BackendsReply{Backends: []events.BackendInfo{{Name: "docker", Workers: []events.WorkerLease{
		{Backend: "docker", Worker: "w1", ExecPath: "agent"}, {Backend: "docker", Worker: "w2", ExecPath: "docker-exec"}}}}})
	s := out.String()
	if !strings.Contains(s, "EXEC") || !strings.Contains(s, " agent ") || !strings.Contains(s, " docker-exec ") {
		t.Fatalf("no exec path in\n%s", s)
	}
}
