//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestResumeAdmittedLikeACreate: a paused sandbox holds none of its
// tenant's max_sandboxes, so its resume is admitted like a create: a
// tenant at its limit cannot resume past it, and can once it is below.
func TestResumeAdmittedLikeACreate(t *testing.T) {
	b := newTestBackend(t, Config{})
	if !b.Info().Capabilities.Has(events.CapSnapshot) {
		t.Skip("this docker client cannot freeze containers")
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: durableRouting, Logger: testLogger(t), Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env.Auth.AddTenant(t, "tenant-r", events.TenantLimits{MaxSandboxes: 1})
	c := env.TenantClient("tenant-r")
	a, err := c.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, a.SandboxID); err != nil {
		t.Fatal(err)
	}
	bsb, err := c.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatalf("a create while the only other sandbox is paused: %v", err)
	}
	if _, err := c.Resume(ctx, a.SandboxID, 0); !errors.Is(err, events.ErrQuotaExceeded) {
		t.Fatalf("a resume past max_sandboxes 1: %v, want QuotaExceeded", err)
	}
	if got, err := c.Get(ctx, a.SandboxID); err != nil || got.State != events.StatePaused {
		t.Fatalf("the refused resume's sandbox: %+v %v, want still paused", got, err)
	}
	if _, err := c.Kill(ctx, bsb.SandboxID); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 30*time.Second, func() bool {
		_, err := c.Resume(ctx, a.SandboxID, 0)
		return err == nil
	}, "the resume once the tenant is below its limit")
}
