package router_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestQueueTimeoutWithinDuplicateWindow: the router publishes a command
// whose ack it did not get again until past its Sbx-Not-After, and takes
// "duplicate" as proof that it was stored in time. That holds only while
// SBX_CMD's duplicate window covers every publication (ADR 25), so a
// QueueTimeout that outlasts it is refused at New.
func TestQueueTimeoutWithinDuplicateWindow(t *testing.T) {
	if router.MaxQueueTimeout <= 30*time.Second || router.MaxQueueTimeout >= bus.CommandDuplicates {
		t.Fatalf("MaxQueueTimeout %v: want above the 30 s default and below the window %v", router.MaxQueueTimeout, bus.CommandDuplicates)
	}
	_, err := router.New(router.Config{RouterID: "r1", QueueTimeout: router.MaxQueueTimeout + time.Second}, nil)
	if !errors.Is(err, router.ErrQueueTimeout) {
		t.Fatalf("New with QueueTimeout past the window: %v, want it refused", err)
	}
	_, err = router.New(router.Config{RouterID: "r1", QueueTimeout: router.MaxQueueTimeout}, nil)
	if err == nil || errors.Is(err, router.ErrQueueTimeout) {
		t.Fatalf("New with QueueTimeout at the bound: %v, want only the missing connection refused", err)
	}
}
