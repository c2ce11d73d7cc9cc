package worker

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/recsign"
)

// recordBatchWindow is how long a record published without waiting (audit
// policy other than fail) may wait for others before the batch is signed
// and published: one Ed25519 signature covers every record of the window
// (ADR 17), and the auditor verifies it once. Nothing an operation answers
// waits for it; the records keep their order.
const recordBatchWindow = 2 * time.Millisecond

// recordBatch gathers the records of one window. The first record of a
// window arms a timer that flushes it; a full batch (recsign.MaxBatch) is
// flushed at once; close flushes what is left and makes later records go
// out alone.
type recordBatch struct {
	mu     sync.Mutex
	recs   []batchedRecord
	closed bool
	// flushing orders the flushes: a batch is taken and handed to the
	// record queue under it, so records reach the stream in the order
	// they were put.
	flushing sync.Mutex
}

type batchedRecord struct {
	m    *nats.Msg
	name recordName
}

// put queues a complete, unsigned record for the next batch.
func (b *recordBatch) put(w *Worker, r batchedRecord) {
	w.unsettled.Add(1) // until settleRecord, or the queue, counts it done
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		w.keys.sign.SignBatch([]*nats.Msg{r.m})
		w.storeRecord(r.m, r.name)
		return
	}
	b.recs = append(b.recs, r)
	n := len(b.recs)
	b.mu.Unlock()
	switch {
	case n >= recsign.MaxBatch:
		b.flush(w)
	case n == 1:
		time.AfterFunc(recordBatchWindow, func() { b.flush(w) })
	}
}

// flush signs the queued records as one batch and hands them to the
// record queue.
func (b *recordBatch) flush(w *Worker) {
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	recs := b.recs
	b.recs = nil
	b.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	ms := make([]*nats.Msg, len(recs))
	for i := range recs {
		ms[i] = recs[i].m
	}
	w.keys.sign.SignBatch(ms)
	for _, r := range recs {
		w.storeRecord(r.m, r.name)
	}
}

// close flushes the last batch; records put after it go out alone.
func (b *recordBatch) close(w *Worker) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.flush(w)
}
