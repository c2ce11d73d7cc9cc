//go:build integration

package e2bcompat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
)

const e2bRouting = `default_class: untrusted
classes:
  untrusted: {backend: e2b, template: base, require_isolation: microvm}
  code: {backend: e2b, template: code-interpreter-v1, require_isolation: microvm}
`

// e2bBackend is the project's own E2B client (services/e2b-worker),
// configured as E2B's SDKs read their environment, aimed at the front door.
func e2bBackend(t *testing.T, h *harness, workerID string) *e2bworker.Backend {
	t.Helper()
	env := map[string]string{"E2B_API_KEY": h.keys[authtest.TenantA], "E2B_API_URL": h.srv.URL, "E2B_SANDBOX_URL": h.srv.URL}
	cfg := e2bworker.ConfigFromEnv(func(k string) string { return env[k] })
	cfg.WorkerID = workerID
	cfg.CodeInterpreter = true
	cfg.KeepaliveInterval = 2 * time.Second
	cfg.StallGrace = 2 * time.Second
	cfg.RequestTimeout = 20 * time.Second
	cfg.Logger = testLogger()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := e2bworker.NewBackend(ctx, cfg)
	if err != nil {
		t.Fatalf("e2b backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestE2BWorkerThroughFrontDoor: sandboxio's E2B backend, a faithful E2B
// client, runs a sandbox's life through the front door on Docker: create,
// exec with output, files written and read back, kill.
func TestE2BWorkerThroughFrontDoor(t *testing.T) {
	h := startHarness(t)
	b := e2bBackend(t, h, "e2bw"+events.NewID()[:10])
	outer := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: e2bRouting, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sb, err := outer.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Shell(ctx, "echo out; echo err >&2; exit 7")
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 7 {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	p, err := sb.Stream(ctx, []string{"sh", "-c", "for i in 1 2 3; do echo line $i; done"})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		out.Write(c.Data)
	}
	if out.String() != "line 1\nline 2\nline 3\n" {
		t.Fatalf("stream: %q", out.String())
	}
	data := []byte("through two sandboxio layers\n")
	if err := sb.Files().Write(ctx, "/tmp/two-layers.txt", data, 0); err != nil {
		t.Fatal(err)
	}
	back, err := sb.Files().Read(ctx, "/tmp/two-layers.txt")
	if err != nil || string(back) != string(data) {
		t.Fatalf("read back %q, %v", back, err)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	// The inner sandbox is gone from the front door too.
	resp, body := h.rest(t, "GET", "/v2/sandboxes", h.keys[authtest.TenantA], nil)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("front door still lists %s", body)
	}
}

// TestE2BWorkerConformance runs the whole backend conformance suite with
// the E2B backend aimed at the front door.
func TestE2BWorkerConformance(t *testing.T) {
	h := startHarness(t)
	b := e2bBackend(t, h, "e2bw"+events.NewID()[:10])
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: e2bRouting, CodeClass: "code",
		Restarted: func(t *testing.T, workerID string) worker.Backend { return e2bBackend(t, h, workerID) }})
}
