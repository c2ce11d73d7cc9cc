package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestOrphansAreReaped: a sandbox the backend holds for this worker but the
// worker does not track is removed by the periodic reconcile; tracked ones
// are left alone.
func TestOrphansAreReaped(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) {
		c.ReconcileInterval = 100 * time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := env.Create(ctx)
	if _, err := env.Fake.Create(ctx, worker.CreateSpec{SandboxID: "orphan-1", WorkerID: env.WorkerID}); err != nil {
		t.Fatal(err)
	}
	// Another worker on the same host with a live lease keeps its sandbox;
	// one whose worker is gone (no lease, no live record) loses it.
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	leases, err := js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	lease, _ := json.Marshal(events.WorkerLease{Backend: "fake", Worker: "alive-worker", HeartbeatAt: time.Now()})
	if _, err := leases.Put(ctx, events.WorkerKey("fake", "alive-worker"), lease); err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	lost, _ := json.Marshal(events.Sandbox{SandboxID: "of-dead", Backend: "fake", Worker: "dead-worker", State: events.StateLost})
	if _, err := registry.Put(ctx, "of-dead", lost); err != nil {
		t.Fatal(err)
	}
	// of-stranger has no record: another deployment's, never touched.
	for _, sp := range []worker.CreateSpec{{SandboxID: "of-alive", WorkerID: "alive-worker"}, {SandboxID: "of-dead", WorkerID: "dead-worker"},
		{SandboxID: "of-stranger", WorkerID: "stranger"}} {
		if _, err := env.Fake.Create(ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		got := env.Fake.Live()
		return !slices.Contains(got, "orphan-1") && !slices.Contains(got, "of-dead")
	}, "orphans were not removed: %v", env.Fake.Live())
	if got := env.Fake.Live(); !slices.Contains(got, live.SandboxID) || !slices.Contains(got, "of-alive") || !slices.Contains(got, "of-stranger") {
		t.Fatalf("reconcile removed what it should not: %v", got)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: live.SandboxID, Cmd: []string{"echo", "ok"}}); err != nil {
		t.Fatalf("tracked sandbox after reconcile: %v", err)
	}
}

func TestStdinAfterCloseIsRefused(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "60000"}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := env.Client.SendStdin(ctx, sb.SandboxID, p.ProcessID, []byte("a"), true); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.SendStdin(ctx, sb.SandboxID, p.ProcessID, []byte("b"), false); !errors.Is(err, events.ErrProcessExited) {
		t.Fatalf("stdin after close: %v, want ProcessExited", err)
	}
	// The worker is still alive.
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo"}}); err != nil {
		t.Fatal(err)
	}
}

func TestProcessIDIsNeverReused(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "p1", Cmd: []string{"echo", "first"}}); err != nil {
		t.Fatal(err)
	}
	_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "p1", Cmd: []string{"echo", "second"}})
	if !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("reused process id: %v, want InvalidValue", err)
	}
}

func TestSetTimeoutExtendsRunningProcesses(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "3000"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.SetTimeout(ctx, sb.SandboxID, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("process outlived the old deadline? %+v, %v", res, err)
	}
}

// TestKillIsNotQueuedBehindExecs: a full worker still kills at once.
func TestKillIsNotQueuedBehindExecs(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) { c.Capacity = 1 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	for i := 0; i < 3; i++ {
		go func() {
			_, _ = env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "20000"}})
		}()
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(env.Fake.CallsTo("Exec")) == 1 }, "the first exec never ran")
	start := time.Now()
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("kill behind a full worker took %s", took)
	}
}

// TestUnstoredRecordsAreMeasured: under audit policy warn an operation whose
// record cannot be stored proceeds, and the gap shows in the worker's
// metrics.
func TestUnstoredRecordsAreMeasured(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) { c.Meter = meter }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, events.StreamOps); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo"}}); err != nil {
		t.Fatalf("exec under warn with no SBX_OPS: %v", err)
	}
	pending := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == "sandboxio.worker.records.pending" {
					if sum, ok := m.Data.(metricdata.Sum[int64]); ok && len(sum.DataPoints) > 0 {
						return sum.DataPoints[0].Value
					}
				}
			}
		}
		return 0
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return pending() >= 2 }, "the unstored records are not counted: %d", pending())
}

// TestNodeCommandsDoNotStall: node commands queued for a capacity-1 worker
// all get through at once. The node consumer pulled one message at a time
// (its capacity), and nats.go skips the next pull when a message is handled
// while the previous pull request is still being sent: with a batch of one
// nothing else wakes it, and the consumer stalls until its missed-heartbeat
// check (2 × 15 s). That was TestKillIsNotQueuedBehindExecs's SBX_E1608 (the
// kill arrived 30 s late).
func TestNodeCommandsDoNotStall(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) { c.Capacity = 1 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	nc := env.Conn("test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prefix := nats.NewInbox()
	var answered atomic.Int64
	sub, err := nc.Subscribe(prefix+".*", func(*nats.Msg) { answered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	const n = 300
	data := []byte(`{"sandbox_id":"` + sb.SandboxID + `","process_id":"nope","signal":"TERM"}`)
	for i := range n {
		m, err := cemsg.Encode(events.NodeSubject("fake", env.WorkerID, events.Verb(events.OpSignal)), cemsg.Envelope{ID: events.NewID(),
			Type: events.CommandType(events.OpSignal), Source: "test/burst", Subject: sb.SandboxID, ReplyTo: prefix + "." + strconv.Itoa(i), Data: data})
		if err != nil {
			t.Fatal(err)
		}
		env.SignCommand(m)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("commands not stored")
	}
	start := time.Now()
	poll.Eventually(t, 10*time.Second, func() error {
		if got := answered.Load(); got < n {
			return fmt.Errorf("%d of %d node commands answered in %s", got, n, time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
}
