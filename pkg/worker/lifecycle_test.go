package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// slowKill is the fake backend whose Kill waits until released: a
// container that takes its time to be removed.
type slowKill struct {
	*fake.Backend
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newSlowKill() *slowKill {
	return &slowKill{Backend: fake.New(fake.Config{}), entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowKill) Kill(ctx context.Context, id string) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Backend.Kill(ctx, id)
}

// TestExecDuringKillIsRefused: an exec that arrives while a kill is removing
// the sandbox is refused with SandboxGone and never reaches the backend.
func TestExecDuringKillIsRefused(t *testing.T) {
	b := newSlowKill()
	env := sbxtest.Start(t, sbxtest.Options{Backend: b})
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	killed := make(chan error, 1)
	go func() {
		_, err := env.Client.Kill(ctx, sb.SandboxID)
		killed <- err
	}()
	select {
	case <-b.entered:
	case <-ctx.Done():
		t.Fatal("the kill never reached the backend")
	}
	execsBefore := len(b.CallsTo("Exec"))
	_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "late"}})
	if !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec during a kill: %v, want SandboxGone", err)
	}
	if n := len(b.CallsTo("Exec")); n != execsBefore {
		t.Fatalf("the exec reached the backend while it removed the sandbox (%d calls, %d before)", n, execsBefore)
	}
	release()
	if err := <-killed; err != nil {
		t.Fatalf("kill: %v", err)
	}
}

// TestNodeConsumerRecreated: a worker whose node consumer is deleted under
// it (the reaper, after a partition longer than lease + grace) creates it
// again, and execs and kills reach it within a bound.
func TestNodeConsumerRecreated(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLog(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{events.NodeConsumer("fake", env.WorkerID), events.PoolConsumer("fake")} {
		if err := js.DeleteConsumer(ctx, events.StreamCommands, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	start := time.Now()
	poll.Eventually(t, 15*time.Second, func() error {
		ectx, ecancel := context.WithTimeout(ctx, 2*time.Second)
		defer ecancel()
		_, err := env.Client.Exec(ectx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "back"}, TimeoutMS: 1000})
		return err
	})
	t.Logf("exec works again %s after the consumers were deleted", time.Since(start).Round(time.Millisecond))
	// The pool consumer is back too: creates work.
	env.Create(ctx)
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatalf("kill after the consumer came back: %v", err)
	}
}

func testLog(t *testing.T) *slog.Logger {
	if os.Getenv("SBX_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestShutdownIsBounded: a worker that keeps its sandboxes on shutdown
// (split mode) stops within ShutdownGrace plus a little while execs without
// timeout_ms run, and their callers, buffered and streamed, get the
// retryable SBX_E1620 WorkerShutdown.
func TestShutdownIsBounded(t *testing.T) {
	const grace = time.Second
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.KillOnShutdown, c.ShutdownGrace = false, grace
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	stream, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "600000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	buffered := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "buffered", Cmd: []string{"sleep", "600000"}})
		buffered <- err
	}()
	poll.Eventually(t, 10*time.Second, poll.Bool("both sleeps running", func() bool {
		return len(env.Fake.CallsTo("Exec")) == 2
	}))
	took := env.StopWorkers(grace + 10*time.Second)
	t.Logf("worker stopped in %s (grace %s)", took.Round(time.Millisecond), grace)
	if took > grace+6*time.Second {
		t.Errorf("shutdown took %s, want about the grace (%s)", took, grace)
	}
	for name, err := range map[string]error{"buffered": <-buffered, "streamed": streamEnd(t, stream)} {
		if !errors.Is(err, events.ErrWorkerShutdown) || !events.AsError(err).Retryable {
			t.Errorf("%s exec at shutdown: %v, want retryable WorkerShutdown", name, err)
		}
	}
	if live := env.Fake.Live(); len(live) != 1 {
		t.Errorf("the sandbox did not survive the shutdown: %v", live)
	}
}

// streamEnd reads a stream to its end and returns its error.
func streamEnd(t *testing.T, p *client.Process) error {
	t.Helper()
	_, err := p.Wait()
	return err
}

// TestStreamEndsAfterSameIDRestart: a worker that crashes while a client
// streams a process, and comes back with the same id before its lease runs
// out, re-adopts the sandbox but not the process: the client's stream ends
// with SBX_E1621 ProcessLost instead of waiting forever (the lease it
// checks is alive).
func TestStreamEndsAfterSameIDRestart(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "100000", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error { // the exec's opened record is stored
		st, err := js.Stream(ctx, events.StreamOps)
		if err != nil {
			return err
		}
		_, err = st.GetLastMsgForSubject(ctx, events.OpsSubject("fake", sb.SandboxID, events.EventOpened))
		return err
	})
	env.CrashWorkers()
	w2, err := worker.New(worker.Config{WorkerID: env.WorkerID, Bus: env.Bus, KillOnShutdown: true, Logger: testLog(t)}, env.Conn("worker-2"), env.Fake)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })

	start := time.Now()
	_, err = p.Wait()
	if !errors.Is(err, events.ErrProcessLost) {
		t.Fatalf("stream after a same-id restart: %v, want ProcessLost", err)
	}
	t.Logf("the stream ended %s after the restart: %v", time.Since(start).Round(time.Millisecond), err)
	// The sandbox itself was re-adopted.
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "ok"}}); err != nil {
		t.Fatalf("exec in the re-adopted sandbox: %v", err)
	}
}

// slowSignal is the fake backend whose Signal to one sandbox hangs until
// released: a sandbox that is slow to answer.
type slowSignal struct {
	*fake.Backend
	slow    string
	entered atomic.Int32
	release chan struct{}
}

func (s *slowSignal) Signal(ctx context.Context, id, pid, sig string) error {
	if id == s.slow {
		s.entered.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Backend.Signal(ctx, id, pid, sig)
}

// TestSlowSandboxDoesNotStallOthers: a signal stuck in one sandbox holds up
// neither stdin nor signals of another; and one sandbox's stdin and
// signals keep their order (the data written before a TERM is read).
func TestSlowSandboxDoesNotStallOthers(t *testing.T) {
	b := &slowSignal{Backend: fake.New(fake.Config{}), release: make(chan struct{})}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b})
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow, other := env.Create(ctx), env.Create(ctx)
	b.slow = slow.SandboxID
	stuck, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: slow.SandboxID, Cmd: []string{"sleep", "60000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	cat, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: other.SandboxID, Cmd: []string{"cat"}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	signalled := make(chan error, 1)
	go func() { signalled <- env.Client.Signal(ctx, slow.SandboxID, stuck.ProcessID, "TERM") }()
	poll.Eventually(t, 5*time.Second, poll.Bool("the slow signal reached the backend", func() bool {
		return b.entered.Load() == 1
	}))
	start := time.Now()
	for i := 0; i < 20; i++ {
		if err := env.Client.SendStdin(ctx, other.SandboxID, cat.ProcessID, []byte("x"), false); err != nil {
			t.Fatalf("stdin to another sandbox while one is slow: %v", err)
		}
	}
	if err := env.Client.SendStdin(ctx, other.SandboxID, cat.ProcessID, []byte("end\n"), true); err != nil {
		t.Fatal(err)
	}
	res, err := cat.Wait()
	if err != nil || res.StdoutBytes != 24 {
		t.Fatalf("cat in the other sandbox: %+v %v", res, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the other sandbox's stdin took %s behind a stuck signal", d)
	}
	select {
	case err := <-signalled:
		t.Fatalf("the stuck signal returned early: %v", err)
	default:
	}
	release()
	if err := <-signalled; err != nil {
		t.Fatalf("signal once released: %v", err)
	}
}

// TestOrphanedCreateIsAnswered: a create redelivered after the worker that
// claimed it died mid-create (its lease gone) is answered with the
// retryable SBX_E1622 CreateOrphaned, and the claim is ended, instead of
// being dropped for the dead worker to answer.
func TestOrphanedCreateIsAnswered(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := env.Conn("test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	id, opID := events.NewID(), events.NewID()
	deadline := time.Now().Add(5 * time.Minute).UTC()
	claim, _ := json.Marshal(events.Sandbox{SandboxID: id, Backend: "fake", Worker: "died-mid-create", State: events.StateCreating,
		CreateOp: opID, Deadline: deadline, CreatedAt: time.Now().UTC()})
	if _, err := registry.Create(ctx, id, claim); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(events.CreateCommand{SandboxID: id, Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
		Request: events.CreateRequest{TimeoutS: 300}, Deadline: deadline})
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cemsg.Encode(events.CreateSubject("fake"), cemsg.Envelope{ID: opID, Type: events.CommandType(events.OpCreate),
		Source: "test/redelivery", ReplyTo: inbox, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	env.SignCommand(m)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	reply, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no answer to the orphaned create: %v", err)
	}
	e := events.DecodeError(reply.Data)
	if e == nil || e.Code != events.CodeCreateOrphaned || !e.Retryable {
		t.Fatalf("orphaned create answered %s, want retryable CreateOrphaned", reply.Data)
	}
	entry, err := registry.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rec events.Sandbox
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || !rec.State.Ended() {
		t.Fatalf("the orphaned claim is still %s", rec.State)
	}
}

// janitorFake is the fake backend with a janitor the test drives.
type janitorFake struct {
	*fake.Backend
	mu sync.Mutex
	h  func(worker.Reaped)
}

func (j *janitorFake) OnReap(h func(worker.Reaped)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.h = h
}

func (j *janitorFake) reap(r worker.Reaped) {
	j.mu.Lock()
	h := j.h
	j.mu.Unlock()
	if h != nil {
		h(r)
	}
}

// TestJanitorRemovalsAreRecorded: what a backend's janitor removed is
// recorded as a reap and marked gone in the registry: a sandbox of another
// (dead) worker that this registry knows, and one this worker tracks (which
// goes through kill, so its processes end too).
func TestJanitorRemovalsAreRecorded(t *testing.T) {
	b := &janitorFake{Backend: fake.New(fake.Config{})}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	foreign := events.NewID()
	rec, _ := json.Marshal(events.Sandbox{SandboxID: foreign, Backend: "fake", Worker: "long-dead", State: events.StateRunning,
		Deadline: time.Now().Add(-time.Hour).UTC()})
	if _, err := registry.Create(ctx, foreign, rec); err != nil {
		t.Fatal(err)
	}
	own := env.Create(ctx)
	poll.Eventually(t, 5*time.Second, poll.Bool("the janitor handler registered", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.h != nil
	}))
	b.reap(worker.Reaped{SandboxID: foreign, WorkerID: "long-dead", Reason: "past its deadline"})
	b.reap(worker.Reaped{SandboxID: own.SandboxID, WorkerID: env.WorkerID, Reason: "past its deadline"})
	ops, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{foreign, own.SandboxID} {
		poll.Eventually(t, 10*time.Second, func() error {
			entry, err := registry.Get(ctx, id)
			if err != nil {
				return err
			}
			var got events.Sandbox
			if err := json.Unmarshal(entry.Value(), &got); err != nil {
				return err
			}
			if got.State != events.StateGone {
				return fmt.Errorf("%s is %s", id, got.State)
			}
			_, err = ops.GetLastMsgForSubject(ctx, events.OpsSubject("fake", id, events.EventClosed))
			return err
		})
	}
}

// TestSetTimeoutRacingKill: set_timeouts racing a kill (their registry
// writes are made outside sb.mu, ordered by sb.regMu) never bring the
// record back from gone, and nothing deadlocks.
func TestSetTimeoutRacingKill(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := 0; round < 5; round++ {
		sb := env.Create(ctx)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = env.Client.SetTimeout(ctx, sb.SandboxID, time.Duration(100+i)*time.Second)
			}()
		}
		if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
			t.Fatalf("kill: %v", err)
		}
		wg.Wait()
		got, err := env.Client.Get(ctx, sb.SandboxID)
		if err != nil || got.State != events.StateGone {
			t.Fatalf("after a kill raced by set_timeouts: %+v %v", got, err)
		}
	}
}

// blockingCreate is the fake backend whose Create waits until released.
type blockingCreate struct {
	*fake.Backend
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (b *blockingCreate) Create(ctx context.Context, spec worker.CreateSpec) (worker.Created, error) {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.release:
	case <-ctx.Done():
		return worker.Created{}, ctx.Err()
	}
	return b.Backend.Create(ctx, spec)
}

// TestCreateRegistryFailureIsRetryable: a create whose record cannot be
// written as running (the registry refuses the write, no revision
// conflict: nobody killed it) answers the retryable SBX_E1601
// BackendUnavailable, not "killed while it was being created" (SBX_E1204).
func TestCreateRegistryFailureIsRetryable(t *testing.T) {
	b := &blockingCreate{Backend: fake.New(fake.Config{}), entered: make(chan struct{}), release: make(chan struct{})}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b})
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_"+events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	orig := stream.CachedInfo().Config
	errc := make(chan error, 1)
	id := events.NewID()
	go func() {
		_, err := env.Client.Create(ctx, events.CreateRequest{SandboxID: id}, client.WithLifetime(5*time.Minute))
		errc <- err
	}()
	select {
	case <-b.entered:
	case <-ctx.Done():
		t.Fatal("the create never reached the backend")
	}
	// The registry now refuses any record (too large): not a conflict.
	small := orig
	small.MaxMsgSize = 16
	if _, err := js.UpdateStream(ctx, small); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		if _, err := js.UpdateStream(rctx, orig); err != nil {
			t.Errorf("registry limits not restored: %v", err)
		}
	}
	release()
	select {
	case err = <-errc:
	case <-ctx.Done():
		restore()
		t.Fatal("the create was never answered")
	}
	restore()
	if !errors.Is(err, events.ErrBackendUnavailable) || !client.Retryable(err) {
		t.Fatalf("create with a failing registry write: %v, want retryable BackendUnavailable", err)
	}
	if len(b.CallsTo("Kill")) == 0 {
		t.Errorf("the sandbox was not removed after the failed create: calls %v", b.Calls())
	}
	// Its registry claim does not stay "creating" once the registry takes
	// writes again (the failover run left such claims live).
	poll.Eventually(t, 10*time.Second, func() error {
		sb, err := env.Client.Get(ctx, id)
		if err != nil {
			return err
		}
		if !sb.State.Ended() {
			return fmt.Errorf("the failed create's record is %s", sb.State)
		}
		return nil
	})
}

// slowList is the fake backend whose re-adoption listing takes its time (a
// Docker host with many containers).
type slowList struct {
	*fake.Backend
	delay time.Duration
}

func (s *slowList) ListSandboxes(ctx context.Context) ([]worker.Listed, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Backend.ListSandboxes(ctx)
}

// TestBufferedExecAfterSameIDRestart: a buffered exec in flight when its
// worker crashes and comes back with the same id gets SBX_E1621 ProcessLost
// (retryable) as soon as the new process starts, even when re-adopting its
// sandboxes takes longer than the old lease has left; not SBX_E1204 at the
// old lease's end (the sandbox survives), nor the exec's own bound.
func TestBufferedExecAfterSameIDRestart(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "100000"}})
		done <- err
	}()
	poll.Eventually(t, 10*time.Second, func() error {
		if len(env.Fake.CallsTo("Exec")) == 0 {
			return errors.New("the exec has not reached the backend")
		}
		return nil
	})
	env.CrashWorkers()
	slow := &slowList{Backend: env.Fake, delay: 3 * env.Bus.LeaseTTL}
	w2, err := worker.New(worker.Config{WorkerID: env.WorkerID, Bus: env.Bus, KillOnShutdown: true, Logger: testLog(t)}, env.Conn("worker-2"), slow)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })
	select {
	case err := <-done:
		var e *events.Error
		// The exec reached the backend: it may have run, so the answer
		// must not invite a retry (issue 22 C.12).
		if !errors.As(err, &e) || e.Code != events.CodeProcessLost || e.Retryable || e.Details["outcome"] != "unknown" {
			t.Fatalf("buffered exec across a same-id restart: %v (%+v) after %s, want %s, not retryable, outcome unknown",
				err, e, time.Since(start).Round(time.Millisecond), events.CodeProcessLost)
		}
		if took := time.Since(start); took > env.Bus.LeaseTTL {
			t.Errorf("answered %s after the restart, more than a lease TTL", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the buffered exec got no answer 30 s after the restart")
	}
}

// TestKillOfAnUnheldSandboxIsRecorded: a kill that reaches a worker for a
// sandbox the registry says it holds but that it does not hold in memory
// (its predecessor died mid-kill) removes it and answers success: with its
// opened and closed records, like every acknowledged operation.
func TestKillOfAnUnheldSandboxIsRecorded(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	id := events.NewID()
	now := time.Now().UTC()
	b, _ := json.Marshal(events.Sandbox{SandboxID: id, Backend: "fake", Worker: env.WorkerID, State: events.StateRunning,
		Tenant: env.Client.Tenant(), CreatedAt: now, Deadline: now.Add(time.Hour)})
	if _, err := reg.Create(ctx, id, b); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		_, err := env.Client.Kill(ctx, id)
		return err
	})
	st, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		for _, phase := range []string{events.EventOpened, events.EventClosed} {
			m, err := st.GetLastMsgForSubject(ctx, events.OpsSubject("fake", id, phase))
			if err != nil {
				return fmt.Errorf("no %s record of the kill: %v", phase, err)
			}
			if !strings.Contains(string(m.Data), `"kind":"kill"`) {
				return fmt.Errorf("the %s record is not the kill's: %s", phase, m.Data)
			}
		}
		return nil
	})
}
