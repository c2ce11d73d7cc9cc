package e2bworker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
)

// TestConformance runs the backend conformance suite against the fake E2B,
// through the real E2B clients, runtime, router and Go client. A restarted
// worker is a new backend on the same fake: E2B processes are not
// re-attached, because envd cannot replay the output written while no
// worker was connected (the backend is a worker.Reattacher that never
// re-attaches and kills what the lost process left; the probe expects
// ProcessLost).
func TestConformance(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	workertest.Run(t, b, e2bCommands, workertest.Options{Routing: routing, CodeClass: "untrusted",
		Restarted: func(t *testing.T, workerID string) worker.Backend {
			return newBackend(t, srv, func(c *e2bworker.Config) { c.WorkerID = workerID })
		}})
}
