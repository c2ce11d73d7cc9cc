package e2bworker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/fakejail"
	"github.com/sandboxio/sandboxio/pkg/events"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
)

// TestFakeSharesOneRoot: the fake E2B runs processes inside the same root
// its files API uses, as the envd user, with envd's PATH — as a real
// sandbox does: a file written through the API is what cat reads at the
// same path, a 0755 write works (its chmod is a process), and files and
// processes of user "user" belong to uid 1000.
func TestFakeSharesOneRoot(t *testing.T) {
	mode := fakejail.Detect()
	if fakejail.HostView(mode) {
		t.Skipf("no jail on this host (mode %s): e2bfake runs processes on the host's paths", mode)
	}
	srv := startFake(t)
	b := newBackend(t, srv, func(c *e2bworker.Config) { c.User = "user" })
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	if err := b.WriteFile(ctx, r.SandboxID, "/home/user/bin/hello.sh", 0o755, strings.NewReader("#!/bin/sh\necho hello from the sandbox\n"), -1); err != nil {
		t.Fatalf("a 0755 write: %v", err)
	}
	exec := func(cmd ...string) string {
		t.Helper()
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: cmd})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v, %v", cmd, res, err)
		}
		return string(res.Stdout)
	}
	if got := exec("/home/user/bin/hello.sh"); got != "hello from the sandbox\n" {
		t.Fatalf("the uploaded script: %q", got)
	}
	if got := exec("cat", "/home/user/bin/hello.sh"); !strings.Contains(got, "echo hello") {
		t.Fatalf("cat of an uploaded file: %q", got)
	}
	if got := exec("sh", "-c", `printf '%s %s' "$HOME" "$PATH"`); got != "/home/user "+fakejail.DefaultPath {
		t.Fatalf("HOME and PATH: %q", got)
	}
	if mode == fakejail.Chroot {
		if got := exec("sh", "-c", "id -u; stat -c %u /home/user/bin/hello.sh; touch /home/user/mine; stat -c %u /home/user/mine"); got != "1000\n1000\n1000\n" {
			t.Fatalf("uids of user's process and files: %q", got)
		}
	}
}
