package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// Creates retried with the same sandbox_id and the same spec (ADR 37).

// retrySpec is the create every test here sends and retries.
func retrySpec(id string) events.CreateRequest {
	return events.CreateRequest{SandboxID: id, TimeoutS: 300, Owner: "retry-owner",
		Env: map[string]string{"A": "1"}, Metadata: map[string]string{"job": "j1"}}
}

// createCalls counts the backend creates of id.
func createCalls(fb *fake.Backend, id string) int {
	n := 0
	for _, c := range fb.CallsTo("Create") {
		if c.SandboxID == id {
			n++
		}
	}
	return n
}

// clientConnName is the connection a raw request is sent on: the tenant's
// in the authenticated mode.
func clientConnName(env *sbxtest.Env) string {
	if env.Auth != nil {
		return authtest.TenantA
	}
	return "client"
}

// TestCreateRetryAfterLostReply: a create that ran but whose reply never
// reached the caller (its reply subject is gone, as when the router or the
// caller's connection died mid-request) is sent again with the same id and
// spec: the retry answers the sandbox the first made, and the backend
// created one.
func TestCreateRetryAfterLostReply(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	req := retrySpec("lost-reply")
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	nc := env.Conn(clientConnName(env))
	// The reply goes to an inbox nobody reads: the caller never learns.
	if err := nc.PublishRequest(events.APISubject(events.OpCreate), nc.NewRespInbox(), data); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 15*time.Second, func() error {
		sb, err := env.Client.Get(ctx(t), req.SandboxID)
		if err != nil {
			return err
		}
		if sb.State != events.StateRunning {
			return fmt.Errorf("state %s", sb.State)
		}
		return nil
	})
	sb, err := env.Client.Create(ctx(t), req)
	if err != nil {
		t.Fatalf("retried create: %v, want the sandbox the first one made", err)
	}
	if sb.SandboxID != req.SandboxID {
		t.Fatalf("retried create answered %s, want %s", sb.SandboxID, req.SandboxID)
	}
	if n := createCalls(env.Fake, req.SandboxID); n != 1 {
		t.Fatalf("the backend created %s %d times, want once", req.SandboxID, n)
	}
}

// TestCreateRetryAfterWorkerLost: a create whose worker died mid-create
// gets SBX_E1607 (retryable); the same create sent again, with the same id,
// succeeds on another worker.
func TestCreateRetryAfterWorkerLost(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: time.Minute})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb})
	if env.Auth != nil {
		t.Skip("starts a second worker with the open layout's config")
	}
	waitWorkerConsumers(t, env, fb.Info().Name)
	req := retrySpec("worker-lost")
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Create(context.Background(), req)
		done <- err
	}()
	poll.Eventually(t, 5*time.Second, func() error {
		if createCalls(fb, req.SandboxID) == 0 {
			return errors.New("the create has not reached the backend")
		}
		return nil
	})
	env.CrashWorkers()
	select {
	case err := <-done:
		if !errors.Is(err, events.ErrWorkerLost) {
			t.Fatalf("create: %v, want %s", err, events.CodeWorkerLost)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the create of a dead worker got no answer within 40s")
	}
	second := fake.New(fake.Config{})
	startWorker(t, env, second)
	env.WaitForBackend(second.Info().Name)
	sb, err := env.Client.Create(ctx(t), req)
	if err != nil {
		t.Fatalf("create retried after %s: %v", events.CodeWorkerLost, err)
	}
	if sb.SandboxID != req.SandboxID {
		t.Fatalf("retried create answered %s, want %s", sb.SandboxID, req.SandboxID)
	}
	if live := second.Live(); len(live) != 1 || live[0] != req.SandboxID {
		t.Fatalf("live sandboxes on the second worker %v, want [%s]", live, req.SandboxID)
	}
	got, err := env.Client.Get(ctx(t), req.SandboxID)
	if err != nil || got.State != events.StateRunning {
		t.Fatalf("get after the retry: %+v, %v; want running", got, err)
	}
}

// TestCreateRetrySameIDOtherSpec: a create with the id of an existing
// sandbox answers that sandbox when it asks for the same one, and
// SBX_E1202 when anything of its spec differs.
func TestCreateRetrySameIDOtherSpec(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	req := retrySpec("same-id")
	if _, err := env.Client.Create(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(*events.CreateRequest)
		want   error // nil: the existing sandbox
	}{
		{"same spec", func(*events.CreateRequest) {}, nil},
		{"other metadata", func(r *events.CreateRequest) { r.Metadata = map[string]string{"job": "j2"} }, events.ErrSandboxExists},
		{"other env name", func(r *events.CreateRequest) { r.Env = map[string]string{"B": "1"} }, events.ErrSandboxExists},
		{"other class", func(r *events.CreateRequest) { r.Class = "broken" }, events.ErrSandboxExists},
		{"other lifetime", func(r *events.CreateRequest) { r.TimeoutS = 301 }, events.ErrSandboxExists},
		{"secrets added", func(r *events.CreateRequest) { r.Secrets = map[string]string{"TOKEN": "s3cr3t-value"} }, events.ErrSandboxExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := retrySpec(req.SandboxID)
			tc.change(&r)
			sb, err := env.Client.Create(ctx(t), r)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("create: %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || sb.SandboxID != req.SandboxID {
				t.Fatalf("create: %v, want the existing sandbox %s", err, req.SandboxID)
			}
		})
	}
	if n := createCalls(env.Fake, req.SandboxID); n != 1 {
		t.Fatalf("the backend created %s %d times, want once", req.SandboxID, n)
	}
}

// TestCreateSameIDConcurrently: two creates of the same id and spec in
// flight at once (a retry sent while the first is still being created)
// both answer the one sandbox.
func TestCreateSameIDConcurrently(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: 1500 * time.Millisecond})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb, Worker: func(c *worker.Config) { c.Capacity = 4 }})
	req := retrySpec("concurrent")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	ids := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			sb, err := env.Client.Create(ctx(t), req)
			errs[i] = err
			if err == nil {
				ids[i] = sb.SandboxID
			}
		})
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || ids[i] != req.SandboxID {
			t.Errorf("create %d: %q, %v; want %s", i, ids[i], errs[i], req.SandboxID)
		}
	}
	if n := createCalls(fb, req.SandboxID); n != 1 {
		t.Fatalf("the backend created %s %d times, want once", req.SandboxID, n)
	}
}

// waitWorkerConsumers waits until the worker's node consumer exists:
// crashing it earlier would fail its start, not test its death.
func waitWorkerConsumers(t *testing.T, env *sbxtest.Env, backend string) {
	t.Helper()
	js, err := jetstream.New(env.Conn(auth.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Consumer(c, events.StreamCommands, events.NodeConsumer(backend, env.WorkerID))
		return err
	})
}

// startWorker runs one more worker of backend b until the test ends.
func startWorker(t *testing.T, env *sbxtest.Env, b worker.Backend) {
	t.Helper()
	w, err := worker.New(worker.Config{Bus: env.Bus, KillOnShutdown: true}, env.Conn(auth.RoleWorker), b)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
}

// TestCreateResentWhenItsRouterDies: the router holding a create dies
// (SIGKILL: its connection closes with the create's reply unsent) while
// the worker creates the sandbox. The Go client sees the router go, sends
// the create again to another router, and gets the sandbox the first
// made; the backend created one.
//
// The backend holds the create until the first router is dead, so that
// the reply can only come through the second router.
func TestCreateResentWhenItsRouterDies(t *testing.T) {
	gate, release := createGate(t)
	fb := fake.New(fake.Config{CreateGate: gate})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb, Worker: func(c *worker.Config) { c.Capacity = 4 }})
	if env.Auth != nil {
		// A tenant may not ping the routers ($SRV is the services'), so its
		// client learns of a router's death only from its own connection
		// or its deadline (pkg/client mayPingRouters).
		t.Skip("a tenant's client does not watch the routers")
	}
	env.StopRouters()
	_, kill := startRouter(t, env)
	req := retrySpec("router-dies")
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := env.Client.Create(c, req)
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{id: sb.SandboxID}
	}()
	poll.Eventually(t, 10*time.Second, func() error {
		if createCalls(fb, req.SandboxID) == 0 {
			return errors.New("the create has not reached the backend")
		}
		return nil
	})
	t.Logf("backend create after %s", time.Since(start))
	startRouter(t, env)
	t.Logf("second router up after %s", time.Since(start))
	kill()
	release() // the create ends only now: its reply needs the resend
	r := <-done
	t.Logf("answered after %s", time.Since(start))
	if r.err != nil || r.id != req.SandboxID {
		t.Fatalf("create held by a dead router: %q, %v after %s; want %s from the live router", r.id, r.err, time.Since(start), req.SandboxID)
	}
	if n := createCalls(fb, req.SandboxID); n != 1 {
		t.Fatalf("the backend created %s %d times, want once", req.SandboxID, n)
	}
}

// TestCreateRetryAfterRouterStopped: a create still queued when its router
// stops is answered SBX_E1601 and its id tombstoned, so that the queued
// command never makes it. The same create sent again to the next router
// makes the sandbox, once.
//
// The backend holds the first create until the routers stopped, so that
// the second is still queued then.
func TestCreateRetryAfterRouterStopped(t *testing.T) {
	gate, release := createGate(t)
	fb := fake.New(fake.Config{CreateGate: gate})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb,
		Worker: func(c *worker.Config) { c.Capacity = 1 },
		Router: func(c *router.Config) { c.DrainTimeout = 300 * time.Millisecond }})
	errs := make(chan error, 2)
	for _, id := range []string{"busy", "stopped-queued"} {
		go func() {
			_, err := env.Client.Create(context.Background(), retrySpec(id))
			errs <- err
		}()
		if id == "busy" {
			poll.Eventually(t, 5*time.Second, func() error {
				if createCalls(fb, id) == 0 {
					return errors.New("the first create has not reached the backend")
				}
				return nil
			})
		}
	}
	// The second create is queued behind the first (the only slot).
	poll.Eventually(t, 5*time.Second, func() error {
		js, err := jetstream.New(env.Conn(auth.RoleRouter))
		if err != nil {
			return err
		}
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(c, events.StreamCommands)
		if err != nil {
			return err
		}
		info, err := s.Info(c)
		if err != nil {
			return err
		}
		if info.State.Msgs < 2 {
			return fmt.Errorf("%d commands in %s", info.State.Msgs, events.StreamCommands)
		}
		return nil
	})
	env.StopRouters()
	for range 2 {
		if err := <-errs; !errors.Is(err, events.ErrBackendUnavailable) {
			t.Fatalf("create in flight at stop: %v, want BackendUnavailable", err)
		}
	}
	release()
	startRouter(t, env)
	sb, err := env.Client.Create(ctx(t), retrySpec("stopped-queued"))
	if err != nil || sb.SandboxID != "stopped-queued" {
		t.Fatalf("create retried after its router stopped: %v", err)
	}
	// The queued original reaches the worker too, once the slot is free:
	// it must not make a second one.
	poll.Eventually(t, 15*time.Second, func() error {
		if live := fb.Live(); len(live) != 1 || live[0] != "stopped-queued" {
			return fmt.Errorf("live sandboxes %v", live)
		}
		return nil
	})
	if n := createCalls(fb, "stopped-queued"); n != 1 {
		t.Fatalf("the backend created stopped-queued %d times, want once", n)
	}
}

// startRouter runs one more router until the test ends; kill closes its
// connection as SIGKILL would (its pending replies are lost).
func startRouter(t *testing.T, env *sbxtest.Env, opts ...func(*router.Config)) (*router.Service, func()) {
	t.Helper()
	routing, err := router.ParseRouting([]byte(sbxtest.DefaultRouting))
	if err != nil {
		t.Fatal(err)
	}
	cfg := router.Config{Bus: env.Bus, Routing: routing}
	for _, o := range opts {
		o(&cfg)
	}
	if env.Auth != nil {
		cfg.SigningSeed = env.SigningSeed(auth.RouterSigner)
	}
	nc := env.Conn(auth.RoleRouter)
	svc, err := router.New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = svc.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	env.WaitForBackend("fake")
	return svc, func() { nc.Close(); cancel() }
}

// createGate is a fake.Config.CreateGate and its release (idempotent, also
// run when the test ends, so that no create stays held).
func createGate(t *testing.T) (<-chan struct{}, func()) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return gate, release
}
