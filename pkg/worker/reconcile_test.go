package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestOrphansAreReaped: a sandbox the backend holds for this worker but the
// worker does not track is removed by the periodic reconcile; tracked ones
// are left alone.
func TestOrphansAreReaped(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.ReconcileInterval = 100 * time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := env.Create(ctx)
	if _, err := env.Fake.Create(ctx, worker.CreateSpec{SandboxID: "orphan-1", WorkerID: env.WorkerID}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Fake.Create(ctx, worker.CreateSpec{SandboxID: "someone-elses", WorkerID: "another-worker"}); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return !slices.Contains(env.Fake.Live(), "orphan-1") },
		"the orphan was not removed: %v", env.Fake.Live())
	if got := env.Fake.Live(); !slices.Contains(got, live.SandboxID) || !slices.Contains(got, "someone-elses") {
		t.Fatalf("reconcile removed what it should not: %v", got)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: live.SandboxID, Cmd: []string{"echo", "ok"}}); err != nil {
		t.Fatalf("tracked sandbox after reconcile: %v", err)
	}
}
