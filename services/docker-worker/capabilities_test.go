package dockerworker

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestAdvertisesSetTimeout: the worker runtime moves a Docker sandbox's
// deadline, so the backend says it can; a create with
// requires:["set_timeout"] is then placed on Docker instead of refused
// with SBX_E1105 (issue 11).
func TestAdvertisesSetTimeout(t *testing.T) {
	if caps := (&Backend{}).Info().Capabilities; !caps.Has(events.CapSetTimeout) {
		t.Fatalf("docker advertises %v, without set_timeout", caps)
	}
}
