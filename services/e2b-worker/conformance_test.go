package e2bworker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

// TestConformance runs the backend conformance suite against the fake E2B,
// through the real E2B clients, runtime, router and Go client.
func TestConformance(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	workertest.Run(t, b, e2bCommands, workertest.Options{Routing: routing, CodeClass: "untrusted"})
}
