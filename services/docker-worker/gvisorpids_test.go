//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestGVisorPIDsAboveCapRefused: a gVisor sandbox's process limit is at
// most runscMaxPIDs, and a class or request asking more was silently
// given runscMaxPIDs. It is refused at create with SBX_E1007 naming
// resources.pids and nothing is made; at the cap it is created with that
// limit inside.
func TestGVisorPIDsAboveCapRefused(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	for _, tc := range []struct {
		name         string
		class, asked int
	}{
		{"request", 0, 4096},
		{"class", runscMaxPIDs + 1, 0},
		{"request over a class within the cap", 64, runscMaxPIDs + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := newSpec(withGVisor(), withResources(events.Resources{PIDs: tc.asked}))
			if tc.class > 0 {
				spec.Spec.Resources = &events.Resources{PIDs: tc.class}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := b.Create(ctx, spec)
			var e *events.Error
			if !errors.As(err, &e) || e.Code != events.CodeInvalidValue || e.Details["field"] != "resources.pids" {
				if err == nil {
					_ = b.Kill(ctx, spec.SandboxID)
				}
				t.Fatalf("class pids %d, request pids %d on runsc: %v, want SBX_E1007 on resources.pids", tc.class, tc.asked, err)
			}
			if sb := b.lookupCached(spec.SandboxID); sb != nil {
				t.Fatalf("a refused create left sandbox %s", spec.SandboxID)
			}
		})
	}
	id := mustCreate(t, b, withGVisor(), withResources(events.Resources{PIDs: runscMaxPIDs}))
	if got := sh(t, b, id, "ulimit -u"); got != strconv.Itoa(runscMaxPIDs) {
		t.Errorf("ulimit -u inside at the cap: %q, want %d", got, runscMaxPIDs)
	}
	// runc has no such cap.
	mustCreate(t, b, withResources(events.Resources{PIDs: 4096}))
}
