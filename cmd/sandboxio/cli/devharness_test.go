package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// devProcess is a `sandboxio dev` running inside the test.
type devProcess struct {
	URL, DataDir string
	Out, Err     *sbxtest.Buffer
}

// startDev runs `sandboxio dev` on a free port and a new data directory,
// with args after them, and stops it at cleanup: the test fails if dev
// exits non-zero or does not stop within 60 s. Cleanups registered before
// startDev run after dev has stopped (its sandboxes killed).
func startDev(t *testing.T, args ...string) *devProcess {
	t.Helper()
	addr := freeAddr(t)
	d := &devProcess{URL: "nats://" + addr, DataDir: t.TempDir(), Out: &sbxtest.Buffer{}, Err: &sbxtest.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	argv := append([]string{"dev", "--listen", addr, "--data-dir", d.DataDir, "--log-level", "error"}, args...)
	go func() { done <- run(ctx, "sandboxio", argv, d.Out, d.Err) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exited %d: %s", code, d.Err.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("dev did not stop within 60s of cancellation")
		}
	})
	return d
}

// waitLive polls `backends` (cliArgs go before it, e.g. --creds FILE) until
// a live worker of backend with tier ("" for any) serves.
func (d *devProcess) waitLive(t *testing.T, backend string, tier events.IsolationTier, cliArgs ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := cli(t, d.URL, append(cliArgs, "backends", "--format", "json")...)
		var b events.BackendsReply
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &b) == nil && liveBackend(b, backend, tier) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev never served a live %s backend: %+v / %s", backend, r, d.Err.String())
		}
		time.Sleep(50 * time.Millisecond) // polling dev's start-up, with a deadline
	}
}

// liveBackend reports whether the backends reply has a live worker of
// backend with tier (the class list names the backend too, so the raw
// output is no proof); tier "" is any tier.
func liveBackend(b events.BackendsReply, backend string, tier events.IsolationTier) bool {
	for _, x := range b.Backends {
		if x.Name == backend && (tier == "" || x.Isolation == tier) && len(x.Workers) > 0 {
			return true
		}
	}
	return false
}
