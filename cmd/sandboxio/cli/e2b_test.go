package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
)

// TestDevE2B runs `sandboxio dev` with E2B's variables pointing at a fake
// E2B and drives the built-in class untrusted (backend e2b, template base)
// through the normal client commands.
func TestDevE2B(t *testing.T) {
	srv := e2bfake.New(e2bfake.Options{TB: t})
	srv.Start()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	t.Setenv("SBX_E2B_TEMPLATE", "")
	t.Setenv("SBX_ROUTING", "")

	// dev kills its sandboxes on exit: nothing is left on E2B (this
	// cleanup runs after dev's own).
	t.Cleanup(func() {
		if ids := srv.SandboxIDs(); len(ids) != 0 {
			t.Errorf("sandboxes left on E2B after dev stopped: %v", ids)
		}
	})
	dev := startDev(t, "--backends", "e2b,fake")
	url := dev.URL
	dev.waitLive(t, "e2b", events.TierMicroVM)

	if r := cli(t, url, "run", "--class", "untrusted", "--", "sh", "-c", "echo hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("run: %+v", r)
	}
	if r := cli(t, url, "run", "--class", "untrusted", "--", "sh", "-c", "echo oops >&2; exit 7"); r.code != 7 || !strings.Contains(r.stderr, "oops") {
		t.Fatalf("run exit 7: %+v", r)
	}
	r := cli(t, url, "create", "--class", "untrusted", "--timeout", "60", "--metadata", "team=e2b")
	var created struct {
		SandboxID string `json:"sandbox_id"`
		Backend   string `json:"backend"`
		Isolation string `json:"isolation"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.SandboxID == "" {
		t.Fatalf("create: %+v", r)
	}
	if created.Backend != "e2b" || created.Isolation != "microvm" {
		t.Fatalf("create reply: %+v", created)
	}
	id := created.SandboxID
	if len(srv.SandboxIDs()) != 1 {
		t.Fatalf("E2B sandboxes: %v", srv.SandboxIDs())
	}
	if r := cli(t, url, "exec", id, "--", "printf", "%s-%s", "a", "b"); r.code != 0 || r.stdout != "a-b" {
		t.Fatalf("exec: %+v", r)
	}
	if r := cli(t, url, "ls", "--metadata", "team=e2b"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("ls: %+v", r)
	}
	if r := cli(t, url, "set-timeout", id, "120s"); r.code != 0 {
		t.Fatalf("set-timeout: %+v", r)
	}
	if r := cli(t, url, "kill", id); r.code != 0 || strings.TrimSpace(r.stdout) != id+" gone" {
		t.Fatalf("kill: %+v", r)
	}
	if ids := srv.SandboxIDs(); len(ids) != 0 {
		t.Fatalf("E2B sandbox survived the kill: %v", ids)
	}
	if r := cli(t, url, "exec", id, "--", "true"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1204") {
		t.Fatalf("exec after kill: %+v", r)
	}
}
