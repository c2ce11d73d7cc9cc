package modalworker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// TestConformance runs the backend conformance suite against the fake
// Modal, through our Modal client, the runtime, the router and the Go
// client. The capability differences (no set_timeout, no signals but KILL)
// are checked in TestCapabilities, not skipped.
func TestConformance(t *testing.T) {
	srv := startFake(t, modalfake.Options{})
	b := newBackend(t, srv, nil)
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: routing})
}
