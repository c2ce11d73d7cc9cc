package worker

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
)

// TestPIDSetIsBounded: a sandbox remembers at most maxRememberedPIDs
// process ids, the most recent ones.
func TestPIDSetIsBounded(t *testing.T) {
	var s pidSet
	n := 3*maxRememberedPIDs + 17
	for i := 0; i < n; i++ {
		s.add(fmt.Sprintf("p%d", i))
	}
	if len(s.ids) != maxRememberedPIDs || len(s.ring) != maxRememberedPIDs {
		t.Fatalf("remembers %d ids (%d in the ring), want %d", len(s.ids), len(s.ring), maxRememberedPIDs)
	}
	if !s.seen(fmt.Sprintf("p%d", n-1)) || !s.seen(fmt.Sprintf("p%d", n-maxRememberedPIDs)) {
		t.Error("a recent id is forgotten")
	}
	if s.seen("p0") || s.seen(fmt.Sprintf("p%d", n-maxRememberedPIDs-1)) {
		t.Error("an old id is still remembered")
	}
}

// TestDeadlineRetryBacksOff: failed deadline kills wait longer each time,
// up to a cap, instead of every 10 s forever.
func TestDeadlineRetryBacksOff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}, {3, 40 * time.Second}, {6, 5 * time.Minute}, {1000, 5 * time.Minute}} {
		if got := deadlineRetryDelay(tc.n); got != tc.want {
			t.Errorf("retry %d: %s, want %s", tc.n, got, tc.want)
		}
	}
}

// TestNoTimerAfterShutdown: once the worker has stopped its timers, a
// failed kill (or anything else) cannot arm a new one.
func TestNoTimerAfterShutdown(t *testing.T) {
	w := &Worker{sandboxes: map[string]*sandbox{}}
	sb := &sandbox{id: "s"}
	w.armKill(sb, time.Hour, "test")
	if sb.timer == nil {
		t.Fatal("no timer armed while running")
	}
	w.sandboxes[sb.id] = sb
	w.stopTimers()
	w.armKill(sb, time.Millisecond, "test")
	if sb.timer != nil {
		t.Fatal("a timer was armed after shutdown")
	}
}

// TestRecordQueueIsBounded: unacknowledged records wait in one bounded
// queue, not a goroutine each; past the bound a record waits AuditTimeout
// for room and is counted lost.
func TestRecordQueueIsBounded(t *testing.T) {
	metrics, err := newWorkerMetrics(noop.NewMeterProvider().Meter("test"), func() int64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{AuditTimeout: 20 * time.Millisecond}, metrics: metrics, log: slog.New(slog.DiscardHandler)}
	q := newRecordQueue() // not drained: every record stays pending
	before := runtime.NumGoroutine()
	for i := 0; i < maxPendingRecords; i++ {
		q.put(w, pendingRecord{id: fmt.Sprint(i)})
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("%d goroutines for %d pending records (%d before)", n, maxPendingRecords, before)
	}
	start := time.Now()
	q.put(w, pendingRecord{id: "one too many"})
	if len(q.ch) != maxPendingRecords {
		t.Fatalf("%d records queued, want the bound %d", len(q.ch), maxPendingRecords)
	}
	if waited := time.Since(start); waited < w.cfg.AuditTimeout {
		t.Errorf("a record past the bound waited %s, want AuditTimeout", waited)
	}
}

// TestRecordQueueTakesWhileThereIsRoom: a record finds room in the queue
// whenever there is some, however late its goroutine runs: once its wait
// for room had also run out (a goroutine descheduled for longer than
// AuditTimeout on a loaded machine, here a wait of 1 ns), the select
// chose between the two at random and lost records with room to spare
// (TestRecordQueueIsBounded once saw its last record queued in 2 µs).
func TestRecordQueueTakesWhileThereIsRoom(t *testing.T) {
	metrics, err := newWorkerMetrics(noop.NewMeterProvider().Meter("test"), func() int64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{AuditTimeout: time.Nanosecond}, metrics: metrics, log: slog.New(slog.DiscardHandler)}
	q := newRecordQueue()
	const n = 200
	for i := range n {
		q.put(w, pendingRecord{id: fmt.Sprint(i)})
	}
	if len(q.ch) != n {
		t.Fatalf("%d of %d records queued with room for all", len(q.ch), n)
	}
}

// TestRecordQueuePutAllocatesNothingWithRoom: a record that finds room in
// the queue costs no allocation (the wait's timer used to be made for
// every record, room or not: three allocations, twice an exec).
func TestRecordQueuePutAllocatesNothingWithRoom(t *testing.T) {
	metrics, err := newWorkerMetrics(noop.NewMeterProvider().Meter("test"), func() int64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{AuditTimeout: time.Second}, metrics: metrics, log: slog.New(slog.DiscardHandler)}
	q := newRecordQueue()
	p := pendingRecord{id: "r"}
	allocs := testing.AllocsPerRun(200, func() {
		q.put(w, p)
		<-q.ch
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per record queued with room, want 0", allocs)
	}
}
