package router_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestPlacementRefusals(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	tests := []struct {
		name string
		req  events.CreateRequest
		want error
	}{
		{"unknown class", events.CreateRequest{Class: "nope", TimeoutS: 10}, events.ErrUnknownClass},
		{"unknown backend dsn", events.CreateRequest{DSN: "firecracker://x", TimeoutS: 10}, events.ErrUnknownBackend},
		{"bad dsn", events.CreateRequest{DSN: "no-scheme", TimeoutS: 10}, events.ErrInvalidDSN},
		{"known backend without workers", events.CreateRequest{DSN: "e2b://base", TimeoutS: 10}, events.ErrNoWorker},
		{"isolation the fake lacks", events.CreateRequest{TimeoutS: 10, RequireIsolation: events.TierMicroVM}, events.ErrIsolationUnavailable},
		{"class isolation the fake lacks", events.CreateRequest{Class: "container", TimeoutS: 10}, events.ErrIsolationUnavailable},
		{"capability the fake lacks", events.CreateRequest{TimeoutS: 10, Requires: []events.Capability{events.CapStatefulCode}}, events.ErrCapabilityNotSupported},
		{"allowlist without the capability", events.CreateRequest{TimeoutS: 10, Network: &events.NetworkPolicy{Egress: "allow", Allow: []string{"example.org"}}}, events.ErrCapabilityNotSupported},
		{"missing lifetime", events.CreateRequest{}, events.ErrLifetimeRequired},
		{"bad sandbox id", events.CreateRequest{TimeoutS: 10, SandboxID: "a.b"}, events.ErrInvalidID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := env.Client.Create(ctx(t), tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if calls := env.Fake.CallsTo("Create"); len(calls) != 0 {
		t.Fatalf("refused creates reached the backend: %+v", calls)
	}
	if list, _ := env.Client.List(ctx(t), events.ListRequest{}); len(list) != 0 {
		t.Fatalf("refused creates left records: %+v", list)
	}
}

func TestWorkerDeathGivesBoundedError(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(ctx(t))
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "600000"}})
		done <- err
	}()
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(env.Fake.CallsTo("Exec")) == 1 }, "exec never reached the backend")
	start := time.Now()
	env.CrashWorkers()
	select {
	case err := <-done:
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Fatalf("exec on a dead worker: %v, want SandboxGone", err)
		}
		if took := time.Since(start); took > 3*env.Bus.LeaseTTL {
			t.Fatalf("error took %s, more than 3 lease TTLs", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec on a dead worker hung")
	}
	// New requests for its sandboxes fail at once.
	_, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo"}})
	if !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec after the worker died: %v", err)
	}
}

func TestIdempotentCreate(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	req := events.CreateRequest{TimeoutS: 60, IdempotencyKey: "job-42", Metadata: map[string]string{"k": "v"}}
	var wg sync.WaitGroup
	ids := make([]string, 5)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := env.Client.Create(ctx(t), req)
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			ids[i] = r.SandboxID
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("idempotent creates returned different sandboxes: %v", ids)
		}
	}
	if n := len(env.Fake.CallsTo("Create")); n != 1 {
		t.Fatalf("backend saw %d creates, want 1", n)
	}
	req.Metadata = map[string]string{"k": "other"}
	if _, err := env.Client.Create(ctx(t), req); !errors.Is(err, events.ErrIdempotencyConflict) {
		t.Fatalf("same key, different request: %v", err)
	}
}

func TestClientChosenIDConflict(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	if _, err := env.Client.Create(ctx(t), events.CreateRequest{TimeoutS: 60, SandboxID: "mine-1"}); err != nil {
		t.Fatal(err)
	}
	// Another spec under the same id (ADR 37: the same spec is a retry).
	if _, err := env.Client.Create(ctx(t), events.CreateRequest{TimeoutS: 61, SandboxID: "mine-1"}); !errors.Is(err, events.ErrSandboxExists) {
		t.Fatalf("second create with the same id: %v", err)
	}
}

func TestCancelledCreateIsTornDown(t *testing.T) {
	backend := fake.New(fake.Config{CreateDelay: 300 * time.Millisecond})
	env := sbxtest.Start(t, sbxtest.Options{Backend: backend})
	c, cancel := context.WithCancel(context.Background())
	go func() {
		for len(backend.CallsTo("Create")) == 0 {
			time.Sleep(time.Millisecond) // poll until the create reached the backend
		}
		cancel()
	}()
	_, err := env.Client.Create(c, events.CreateRequest{TimeoutS: 300})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled create: %v, want context.Canceled", err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(backend.Live()) == 0 && len(backend.CallsTo("Kill")) > 0 },
		"the abandoned sandbox still exists: %v", backend.Live())
}

func TestRoutingFile(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		ok         bool
	}{
		{"default", router.DefaultRoutingYAML, true},
		{"no default_class", "classes:\n  a: {backend: fake}\n", false},
		{"default not a class", "default_class: b\nclasses:\n  a: {backend: fake}\n", false},
		{"unknown key", "default_class: a\nclasses:\n  a: {backend: fake, imgae: x}\n", false},
		{"bad tier", "default_class: a\nclasses:\n  a: {backend: fake, require_isolation: strong}\n", false},
		{"bad backend", "default_class: a\nclasses:\n  a: {backend: \"Fake.X\"}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := router.ParseRouting([]byte(tc.yaml))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseRouting: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestIdempotencyKeyFreedAfterFailure: a failed create does not poison its
// key; a retry with the same key creates a sandbox.
func TestIdempotencyKeyFreedAfterFailure(t *testing.T) {
	backend := fake.New(fake.Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: backend, Routing: sbxtest.DefaultRouting})
	req := events.CreateRequest{TimeoutS: 60, IdempotencyKey: "retry-me", Class: "broken"}
	if _, err := env.Client.Create(ctx(t), req); !errors.Is(err, events.ErrCreateFailed) {
		t.Fatalf("broken create: %v", err)
	}
	// The same request again is dispatched again (the backend sees a second
	// create), instead of being answered with the failed sandbox.
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		_, err := env.Client.Create(ctx(t), req)
		return errors.Is(err, events.ErrCreateFailed) && len(backend.CallsTo("Create")) >= 2
	}, "the retry with the same key was never dispatched again")
}
