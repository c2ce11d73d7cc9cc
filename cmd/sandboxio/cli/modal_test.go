package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// TestDevModal runs `sandboxio dev` with Modal's variables pointing at a
// fake Modal and the example routing file, and drives the modal class
// through the normal client commands.
func TestDevModal(t *testing.T) {
	srv := modalfake.New(modalfake.Options{TB: t})
	srv.Start()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	t.Setenv("SBX_MODAL_APP", "")
	t.Setenv("SBX_MODAL_IMAGE", "")
	routing, err := filepath.Abs("../../../examples/routing/modal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SBX_ROUTING", routing)

	// dev kills its sandboxes on exit: nothing is left on Modal (this
	// cleanup runs after dev's own).
	t.Cleanup(func() {
		if ids := srv.SandboxIDs(); len(ids) != 0 {
			t.Errorf("sandboxes left on Modal after dev stopped: %v", ids)
		}
	})
	dev := startDev(t, "--backends", "modal,fake")
	url := dev.URL
	dev.waitLive(t, "modal", events.TierGVisor)

	if r := cli(t, url, "run", "--class", "modal", "--", "sh", "-c", "echo hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("run: %+v", r)
	}
	if r := cli(t, url, "run", "--class", "modal", "--", "sh", "-c", "echo oops >&2; exit 7"); r.code != 7 || !strings.Contains(r.stderr, "oops") {
		t.Fatalf("run exit 7: %+v", r)
	}
	r := cli(t, url, "create", "--class", "modal", "--timeout", "60", "--metadata", "team=modal")
	var created struct {
		SandboxID string `json:"sandbox_id"`
		Backend   string `json:"backend"`
		Isolation string `json:"isolation"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.SandboxID == "" {
		t.Fatalf("create: %+v", r)
	}
	if created.Backend != "modal" || created.Isolation != "gvisor" {
		t.Fatalf("create reply: %+v", created)
	}
	id := created.SandboxID
	if len(srv.SandboxIDs()) != 1 {
		t.Fatalf("Modal sandboxes: %v", srv.SandboxIDs())
	}
	if r := cli(t, url, "exec", id, "--", "printf", "%s-%s", "a", "b"); r.code != 0 || r.stdout != "a-b" {
		t.Fatalf("exec: %+v", r)
	}
	if r := cli(t, url, "ls", "--metadata", "team=modal"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("ls: %+v", r)
	}
	if r := cli(t, url, "set-timeout", id, "120s"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1105") {
		t.Fatalf("set-timeout must be refused with CapabilityNotSupported: %+v", r)
	}
	if r := cli(t, url, "kill", id); r.code != 0 || strings.TrimSpace(r.stdout) != id+" gone" {
		t.Fatalf("kill: %+v", r)
	}
	if ids := srv.SandboxIDs(); len(ids) != 0 {
		t.Fatalf("Modal sandbox survived the kill: %v", ids)
	}
	if r := cli(t, url, "exec", id, "--", "true"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1204") {
		t.Fatalf("exec after kill: %+v", r)
	}
}

// TestModalWorkerRejectedToken: `sandboxio modal-worker` with a token Modal
// rejects stops at once with a message naming the variables.
func TestModalWorkerRejectedToken(t *testing.T) {
	srv := modalfake.New(modalfake.Options{TB: t})
	srv.Start()
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	t.Setenv("MODAL_TOKEN_SECRET", "as-wrong")
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, "sandboxio", []string{"modal-worker", "--nats", "nats://127.0.0.1:1", "--log-level", "error"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "rejected the token") || strings.Contains(errb.String(), "as-wrong") {
		t.Fatalf("modal-worker with a wrong token: exit %d, stderr %q", code, errb.String())
	}
}
