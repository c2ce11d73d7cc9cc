package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxPendingRecords bounds the records waiting for their ack or a retry. A
// record that finds the queue full waits up to AuditTimeout for room (the
// operation slows down rather than the worker's memory growing), and is
// counted lost past it.
const maxPendingRecords = 4096

// recordDrain bounds how long Run waits, at the very end, for the queue.
const recordDrain = 5 * time.Second

// pendingRecord is a published record whose ack is awaited.
type pendingRecord struct {
	orig *nats.Msg
	id   string
	name recordName
	paf  jetstream.PubAckFuture
	err  error
}

// recordQueue is the one queue of unacknowledged records, drained in order
// by one goroutine (Run starts it and, after every operation has ended,
// closes and waits for it), instead of a goroutine per record.
type recordQueue struct {
	mu      sync.Mutex
	ch      chan pendingRecord
	closed  bool
	drained chan struct{}
}

func newRecordQueue() *recordQueue {
	return &recordQueue{ch: make(chan pendingRecord, maxPendingRecords), drained: make(chan struct{})}
}

// run settles records until the queue is closed and empty.
func (q *recordQueue) run(w *Worker) {
	defer close(q.drained)
	t := time.NewTimer(recordAckWait)
	t.Stop()
	for p := range q.ch {
		w.settleRecord(p, t)
	}
}

// put queues a record, waiting at most AuditTimeout for room.
func (q *recordQueue) put(w *Worker, p pendingRecord) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		select {
		case q.ch <- p: // room: taken, however late this goroutine ran
			return
		default:
		}
		// No room: wait for some, at most AuditTimeout (the timer is made
		// only here, not for every record).
		t := time.NewTimer(w.cfg.AuditTimeout)
		defer t.Stop()
		select {
		case q.ch <- p:
			return
		case <-t.C:
		}
	}
	w.unsettled.Add(-1)
	w.metrics.recordsLost.Add(context.Background(), 1)
	w.log.Error("operation record lost: the record queue is full or closed", "op_id", p.name.opID, "kind", p.name.kind, "limit", maxPendingRecords)
}

// close stops taking records and waits, at most recordDrain, for the
// queued ones.
func (q *recordQueue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	select {
	case <-q.drained:
	case <-time.After(recordDrain):
	}
}
