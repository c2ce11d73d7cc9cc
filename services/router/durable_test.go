package router_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// TestDurableRefusals: what the router answers about durable operations,
// each with its own code and nothing changed. The fake backend keeps no
// snapshots (the docker worker's tests cover the ones that work).
func TestDurableRefusals(t *testing.T) {
	gate := make(chan struct{})
	backend := fake.New(fake.Config{CreateGate: gate})
	env := sbxtest.Start(t, sbxtest.Options{Backend: backend})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A snapshot or pause of a sandbox still being created: busy.
	created := make(chan error, 1)
	go func() {
		_, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300, SandboxID: "held"})
		created <- err
	}()
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(backend.CallsTo("Create")) > 0 }, "the create never reached the backend")
	for _, op := range []string{events.OpSnapshot, events.OpPause} {
		var err error
		if op == events.OpPause {
			_, err = env.Client.Pause(ctx, "held")
		} else {
			_, err = env.Client.Snapshot(ctx, "held", "")
		}
		if !errors.Is(err, events.ErrSandboxBusy) {
			t.Errorf("%s of a sandbox being created: %v, want SandboxBusy", op, err)
		}
	}
	close(gate)
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	unknown := events.ErrSandboxNotFound
	if env.Auth != nil {
		unknown = events.ErrForbidden // a tenant's unknown and foreign ids alike
	}
	for _, tc := range []struct {
		name string
		call func() error
		want *events.Error
	}{
		{"pause where the backend keeps no snapshots", func() error { _, err := env.Client.Pause(ctx, "held"); return err }, events.ErrCapabilityNotSupported},
		{"snapshot where the backend keeps none", func() error { _, err := env.Client.Snapshot(ctx, "held", ""); return err }, events.ErrCapabilityNotSupported},
		{"resume of an unknown sandbox", func() error { _, err := env.Client.Resume(ctx, "nobody", 0); return err }, unknown},
		{"fork of an unknown snapshot", func() error {
			_, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, FromSnapshot: "snap-none"})
			return err
		}, events.ErrSnapshotNotFound},
		{"delete of an unknown snapshot", func() error { _, err := env.Client.DeleteSnapshot(ctx, "snap-none"); return err }, events.ErrSnapshotNotFound},
		{"on_deadline of another value", func() error {
			_, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, OnDeadline: "hibernate"})
			return err
		}, events.ErrInvalidValue},
		{"snapshot name too long", func() error {
			_, err := env.Client.Snapshot(ctx, "held", string(make([]byte, events.MaxSnapshotNameBytes+1)))
			return err
		}, events.ErrPayloadTooLarge},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want.Code)
		}
	}
	// Nothing changed: the sandbox runs, a running sandbox's resume says so.
	r, err := env.Client.Resume(ctx, "held", 0)
	if err != nil || !r.AlreadyRunning {
		t.Fatalf("resume of a running sandbox: %+v %v", r, err)
	}
	if list, err := env.Client.Snapshots(ctx, events.SnapshotsListRequest{}); err != nil || len(list) != 0 {
		t.Fatalf("snapshots: %+v %v", list, err)
	}
	if sb, err := env.Client.Get(ctx, "held"); err != nil || sb.State != events.StateRunning {
		t.Fatalf("get: %+v %v", sb, err)
	}
}
