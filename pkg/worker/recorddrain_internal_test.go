package worker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestRecordQueueDrainsAfterOutage (issue 22 E.26): with SBX_OPS gone and
// its subject answered by nobody (every publish waits for an ack that never
// comes), a full queue of records is taken without the caller waiting on
// the network, and once the stream is back every record is stored within
// seconds: they are republished many at a time, not one by one (4,096
// records took minutes to drain).
func TestRecordQueueDrainsAfterOutage(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second)) // as New makes it
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	metrics, err := newWorkerMetrics(noop.NewMeterProvider().Meter("test"), func() int64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{AuditTimeout: 100 * time.Millisecond}, nc: nc, js: js, metrics: metrics,
		log: slog.New(slog.DiscardHandler), stopping: make(chan struct{}), records: newRecordQueue()}
	go w.records.run(w)
	t.Cleanup(func() { close(w.stopping); w.records.close() })

	// The outage: SBX_OPS deleted, and a subscriber that never answers in
	// its place, so that publishes time out instead of failing at once.
	if err := js.DeleteStream(ctx, events.StreamOps); err != nil {
		t.Fatal(err)
	}
	hole, err := nc.Subscribe(events.SubjectOpsAll, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	const n = maxPendingRecords
	var slowest, total time.Duration
	for i := range n {
		m := nats.NewMsg(events.OpsSubject("fake", "sb", events.EventOpened))
		m.Header.Set(events.HeaderCEID, fmt.Sprintf("op%d-opened", i))
		m.Data = []byte(`{"op_id":"x"}`)
		w.unsettled.Add(1)
		start := time.Now()
		w.storeRecord(m, recordName{opID: fmt.Sprint(i), kind: "exec"})
		d := time.Since(start)
		total += d
		slowest = max(slowest, d)
	}
	t.Logf("%d records handed over in %s (slowest %s) while SBX_OPS did not answer", n, total, slowest)
	if total > 5*time.Second {
		t.Errorf("handing %d records over took %s while SBX_OPS did not answer: the callers waited on the network", n, total)
	}

	// Restored.
	if err := hole.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := bus.Ensure(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	const bound = 30 * time.Second
	for w.RecordsUnsettled() > 0 && time.Since(restored) < bound {
		time.Sleep(20 * time.Millisecond) // polling a condition, with a bound
	}
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d records stored %s after SBX_OPS came back (%d unsettled)", info.State.Msgs, n, time.Since(restored).Round(time.Millisecond), w.RecordsUnsettled())
	if info.State.Msgs != n {
		t.Fatalf("%d of %d records stored within %s of SBX_OPS coming back", info.State.Msgs, n, bound)
	}
}
