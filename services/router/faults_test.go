package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// Item 4: a create the router gave up on (CreateTimeout) must not run
// later. The only worker is busy with a slow create; a second create waits
// in SBX_CMD past the router's CreateTimeout and is taken only then: the
// worker must refuse it (its Sbx-Not-After has passed), not create it.
func TestCreateGivenUpOnNeverRunsLater(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: 3 * time.Second})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb,
		Worker: func(c *worker.Config) { c.Capacity = 1 },
		Router: func(c *router.Config) { c.CreateTimeout = time.Second }})
	first := make(chan error, 1)
	go func() {
		_, err := env.Client.Create(context.Background(), events.CreateRequest{TimeoutS: 300, SandboxID: "slow-first"})
		first <- err
	}()
	poll.Eventually(t, 5*time.Second, func() error {
		if len(fb.CallsTo("Create")) == 0 {
			return errors.New("the first create has not reached the backend")
		}
		return nil
	})
	_, err := env.Client.Create(ctx(t), events.CreateRequest{TimeoutS: 300, SandboxID: "given-up"})
	if !errors.Is(err, events.ErrCreateTimeout) {
		t.Fatalf("second create: %v, want CreateTimeout", err)
	}
	<-first // the slot is free now: the worker takes the second command
	// Give the worker every chance to (wrongly) create it.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, c := range fb.CallsTo("Create") {
			if c.SandboxID == "given-up" {
				t.Fatalf("the create the router gave up on reached the backend")
			}
		}
		time.Sleep(50 * time.Millisecond) // observing that nothing happens
	}
	if sb, err := env.Client.Get(ctx(t), "given-up"); err == nil && !sb.State.Ended() {
		t.Fatalf("the create the router gave up on left a %s sandbox", sb.State)
	}
}

// Item 8: a create held by a worker that dies fails once the worker's
// lease expires, with a retryable code, not after the full CreateTimeout.
func TestCreateOfDeadWorkerFailsAtLeaseExpiry(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: time.Minute})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb})
	// The worker is up once both its consumers are: crashing it earlier
	// would fail its start, not test its death.
	js, err := jetstream.New(env.Conn(auth.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Consumer(c, events.StreamCommands, events.NodeConsumer(fb.Info().Name, env.WorkerID))
		return err
	})
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := env.Client.Create(context.Background(), events.CreateRequest{TimeoutS: 300})
		done <- err
	}()
	poll.Eventually(t, 5*time.Second, func() error {
		if len(fb.CallsTo("Create")) == 0 {
			return errors.New("the create has not reached the backend")
		}
		return nil
	})
	env.CrashWorkers()
	select {
	case err := <-done:
		var e *events.Error
		if !errors.As(err, &e) || e.Code != events.CodeWorkerLost || !e.Retryable {
			t.Fatalf("create: %v, want retryable %s", err, events.CodeWorkerLost)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("create failed after %s, want about the lease TTL", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the create of a dead worker got no answer within 30s (CreateTimeout is 90s)")
	}
}

// Item 13: the router's registry and lease watches are opened again when
// they end, and the caches keep following the buckets.
func TestCacheWatchesRestart(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	routing, err := router.ParseRouting([]byte(sbxtest.DefaultRouting))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := router.New(router.Config{Bus: env.Bus, Routing: routing, SigningSeed: env.SigningSeed(auth.RouterSigner)}, env.Conn(auth.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = svc.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	a := env.Create(ctx(t))
	poll.Eventually(t, 10*time.Second, func() error {
		if !router.Cached(svc, a.SandboxID) {
			return errors.New("the first sandbox is not in the cache")
		}
		return nil
	})
	for _, name := range []string{"registry", "leases"} {
		poll.Eventually(t, 5*time.Second, func() error {
			if !router.StopWatch(svc, name) {
				return errors.New("no " + name + " watch to stop")
			}
			return nil
		})
	}
	stoppedAt := time.Now()
	b := env.Create(ctx(t))
	poll.Eventually(t, 10*time.Second, func() error {
		if !router.Cached(svc, b.SandboxID) {
			return errors.New("a sandbox created after the watch ended never reached the cache")
		}
		if !router.LeaseSeen(svc).After(stoppedAt) {
			return errors.New("no heartbeat after the lease watch ended reached the cache")
		}
		return nil
	})
}

// A router stopped while creates are in flight (a rolling restart) waits
// for their answers up to DrainTimeout; what is still pending after it is
// answered BackendUnavailable and leaves no sandbox: one a worker had
// claimed is killed, one still queued finds a tombstone and is never made.
func TestStoppedRouterLeavesNoSandbox(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: 3 * time.Second})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb,
		Worker: func(c *worker.Config) { c.Capacity = 1 },
		Router: func(c *router.Config) { c.DrainTimeout = 500 * time.Millisecond }})
	errs := make(chan error, 2)
	for _, id := range []string{"claimed", "queued"} {
		go func() {
			_, err := env.Client.Create(context.Background(), events.CreateRequest{TimeoutS: 300, SandboxID: id})
			errs <- err
		}()
		poll.Eventually(t, 5*time.Second, func() error {
			if id == "claimed" && len(fb.CallsTo("Create")) == 0 {
				return errors.New("the first create has not reached the backend")
			}
			return nil
		})
	}
	time.Sleep(200 * time.Millisecond) // let the second create reach SBX_CMD
	env.StopRouters()
	for range 2 {
		if err := <-errs; !errors.Is(err, events.ErrBackendUnavailable) {
			t.Errorf("create in flight at stop: %v, want BackendUnavailable", err)
		}
	}
	// The worker finishes the first create (then kills it) and takes the
	// second (then finds the tombstone): nothing may stay.
	poll.Eventually(t, 15*time.Second, func() error {
		for _, c := range fb.CallsTo("Kill") {
			if c.SandboxID == "claimed" {
				return nil
			}
		}
		return errors.New("the claimed sandbox was never killed")
	})
	time.Sleep(2 * time.Second) // the worker's slot is free: give it time to (wrongly) create the queued one
	if live := fb.Live(); len(live) != 0 {
		t.Fatalf("live fake sandboxes %v", live)
	}
	for _, c := range fb.CallsTo("Create") {
		if c.SandboxID == "queued" {
			t.Fatal("the queued create reached the backend after its router had answered it")
		}
	}
}

// A worker restarted with the same id faster than its lease expires never
// answers the commands its old process took: once its lease says it started
// again (WorkerLease.StartedAt moved on), the router answers them instead
// of waiting for their bound: a buffered exec gets SBX_E1621 ProcessLost
// (not retryable: it may have run), its process gone with the old worker process.
func TestCommandsOfRestartedWorkerFail(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(ctx(t))
	js, err := jetstream.New(env.Conn(auth.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	leases, err := js.KeyValue(ctx(t), events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	key := events.WorkerKey(sb.Backend, env.WorkerID)
	putStarted := func(at time.Time) {
		entry, err := leases.Get(ctx(t), key)
		if err != nil {
			t.Fatal(err)
		}
		var l events.WorkerLease
		if err := json.Unmarshal(entry.Value(), &l); err != nil {
			t.Fatal(err)
		}
		l.StartedAt, l.HeartbeatAt = at, time.Now().UTC()
		b, _ := json.Marshal(l)
		if _, err := leases.Put(ctx(t), key, b); err != nil {
			t.Fatal(err)
		}
	}
	putStarted(time.Now().Add(-time.Hour)) // the old process
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(context.Background(), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "60000"}})
		done <- err
	}()
	poll.Eventually(t, 5*time.Second, func() error {
		for _, c := range env.Fake.CallsTo("Exec") {
			if c.SandboxID == sb.SandboxID {
				return nil
			}
		}
		return errors.New("the exec has not reached the backend")
	})
	putStarted(time.Now()) // a new process of the same worker id
	select {
	case err := <-done:
		var e *events.Error
		if !errors.As(err, &e) || e.Code != events.CodeProcessLost || e.Retryable || e.Details["outcome"] != "unknown" {
			t.Fatalf("exec on the restarted worker: %v, want %s, not retryable (it may have run)", err, events.CodeProcessLost)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec taken by the old process got no answer 10s after the restart")
	}
}

// A kill of a sandbox whose worker is lost (its lease ended) cannot reach
// the worker, and the sandbox is not known to be gone yet: the caller gets
// SBX_E1624 KillDeferred, retryable (not SandboxGone, final), and the same
// kill succeeds once the sandbox is marked lost (the reaper's part,
// written here by hand).
func TestKillOnALostWorker(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(ctx(t))
	env.CrashWorkers()
	var err error
	poll.Eventually(t, 5*env.Bus.LeaseTTL, func() error {
		_, err = env.Client.Kill(ctx(t), sb.SandboxID)
		if err == nil {
			return errors.New("the kill of a lost worker's sandbox succeeded before it was marked lost")
		}
		var e *events.Error
		if errors.As(err, &e) && e.Code == events.CodeWorkerTimeout {
			return err // the lease has not expired yet
		}
		return nil
	})
	var e *events.Error
	if !errors.As(err, &e) || e.Code != events.CodeKillDeferred || !e.Retryable {
		t.Fatalf("kill on a lost worker: %v, want retryable %s", err, events.CodeKillDeferred)
	}
	// The reaper marks it lost; the retried kill succeeds.
	js, err := jetstream.New(env.Conn(auth.RoleRouter))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := js.KeyValue(ctx(t), events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := reg.Get(ctx(t), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var rec events.Sandbox
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec.State, rec.EndedAt, rec.EndReason = events.StateLost, &now, "worker lost"
	b, _ := json.Marshal(rec)
	if _, err := reg.Update(ctx(t), sb.SandboxID, b, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		r, err := env.Client.Kill(ctx(t), sb.SandboxID)
		if err != nil {
			return err
		}
		if !r.AlreadyGone {
			return errors.New("the kill did not say already gone")
		}
		return nil
	})
}
