package worker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxPendingRecords bounds the records the queue holds: waiting for their
// first publish, in flight, or waiting for a retry. A record that finds the
// queue full waits up to AuditTimeout for room (the operation slows down
// rather than the worker's memory growing), and is counted lost past it.
const maxPendingRecords = 4096

// maxRecordsInFlight bounds the records published and not yet
// acknowledged: the queue drains this many at a time (one at a time, 4,096
// records took minutes to drain after an outage).
const maxRecordsInFlight = 256

// recordDrain bounds how long Run waits, at the very end, for the queue.
const recordDrain = 5 * time.Second

// Retries of a record the stream did not acknowledge are held back, all
// together, for a back-off that doubles from minRecordBackoff up to
// maxRecordBackoff while publishes keep failing.
const (
	minRecordBackoff = 50 * time.Millisecond
	maxRecordBackoff = 2 * time.Second
)

// pendingRecord is a record to store, and its latest publish.
type pendingRecord struct {
	orig *nats.Msg
	id   string
	name recordName
	// attempt counts the publishes so far; until is when retrying stops
	// (set at the first publish); deadline is when the latest publish's
	// ack is given up on.
	attempt  int
	until    time.Time
	deadline time.Time
	paf      jetstream.PubAckFuture
	err      error
}

// recordQueue holds the unacknowledged records. put only queues (no
// network I/O); one goroutine (run, which Run starts and, after every
// operation has ended, closes and waits for) publishes them in order, up
// to maxRecordsInFlight at a time, and republishes those not acknowledged,
// in any order, until they are stored or given up on.
type recordQueue struct {
	mu sync.Mutex
	// ch holds the records waiting for their first publish, in order. It
	// never blocks a send: held counts these and every other record the
	// queue holds and stays within its capacity.
	ch     chan pendingRecord
	held   int
	closed bool
	// room has a token when a record has left a full queue.
	room    chan struct{}
	drained chan struct{}
}

func newRecordQueue() *recordQueue {
	return &recordQueue{ch: make(chan pendingRecord, maxPendingRecords), room: make(chan struct{}, 1), drained: make(chan struct{})}
}

// put queues a record, waiting at most AuditTimeout for room.
func (q *recordQueue) put(w *Worker, p pendingRecord) {
	taken, closed := q.take(p)
	if !taken && !closed {
		// No room: wait for some, at most AuditTimeout (the timer is made
		// only here, not for every record).
		t := time.NewTimer(w.cfg.AuditTimeout)
		defer t.Stop()
		for waiting := true; waiting && !taken && !closed; {
			select {
			case <-q.room:
			case <-t.C:
				waiting = false // one more look: room may have come just now
			}
			taken, closed = q.take(p)
		}
		if taken {
			q.relay() // room for another waiter, whose token this one took
		}
	}
	if taken {
		return
	}
	w.unsettled.Add(-1)
	w.metrics.recordsLost.Add(detached(), 1)
	w.log.Error("operation record lost: the record queue is full or closed", "op_id", p.name.opID, "kind", p.name.kind, "limit", maxPendingRecords)
}

// take queues p when the queue is open and has room.
func (q *recordQueue) take(p pendingRecord) (taken, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.held >= maxPendingRecords {
		return false, q.closed
	}
	q.held++
	q.ch <- p // room: see ch
	return true, false
}

// left makes room for one record.
func (q *recordQueue) left() {
	q.mu.Lock()
	q.held--
	q.mu.Unlock()
	q.signalRoom()
}

// relay passes the room token on while there is room.
func (q *recordQueue) relay() {
	q.mu.Lock()
	room := q.held < maxPendingRecords
	q.mu.Unlock()
	if room {
		q.signalRoom()
	}
}

func (q *recordQueue) signalRoom() {
	select {
	case q.room <- struct{}{}:
	default:
	}
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

// run stores the queued records until the queue is closed and empty.
func (q *recordQueue) run(w *Worker) {
	defer close(q.drained)
	d := recordDrainer{w: w, q: q, in: q.ch, backoff: minRecordBackoff, t: time.NewTimer(time.Hour)}
	d.t.Stop()
	for d.step() {
	}
}

// recordDrainer is run's state: the records in flight, oldest first, and
// those to publish again once hold has passed.
type recordDrainer struct {
	w        *Worker
	q        *recordQueue
	in       <-chan pendingRecord // nil once closed and empty
	inflight []pendingRecord
	retry    []pendingRecord
	hold     time.Time
	backoff  time.Duration
	t        *time.Timer
}

// step publishes what it may, then waits for one event: the oldest
// publish's ack or failure, a new record, or the end of a hold. It
// returns false once there is nothing left and nothing more can come.
func (d *recordDrainer) step() bool {
	d.fill()
	if len(d.inflight) == 0 && len(d.retry) == 0 && d.in == nil {
		return false
	}
	var ok <-chan *jetstream.PubAck
	var fail <-chan error
	var wake time.Time // the oldest publish's deadline, or the hold's end
	if len(d.inflight) > 0 {
		head := d.inflight[0]
		if head.err != nil { // refused before it was sent
			d.failed(head.err)
			return true
		}
		ok, fail, wake = head.paf.Ok(), head.paf.Err(), head.deadline
	}
	var timeout <-chan time.Time
	if len(d.retry) > 0 && (wake.IsZero() || d.hold.Before(wake)) {
		wake = d.hold
	}
	if !wake.IsZero() {
		d.t.Reset(max(time.Until(wake), 0))
		defer d.t.Stop()
		timeout = d.t.C
	}
	var in <-chan pendingRecord
	if d.canPublish() {
		in = d.in // a new record goes out as soon as it comes
	}
	var stop <-chan struct{}
	if len(d.retry) > 0 {
		stop = d.w.stopping // fill gives the retries up
	}
	select {
	case <-ok:
		d.stored()
	case err := <-fail:
		d.failed(err)
	case <-timeout:
		if len(d.inflight) > 0 && !time.Now().Before(d.inflight[0].deadline) {
			d.failed(jetstream.ErrAsyncPublishTimeout)
		}
	case p, open := <-in:
		if !open {
			d.in = nil
			return true
		}
		d.publish(p)
	case <-stop:
	}
	return true
}

// canPublish reports whether another publish may go out now.
func (d *recordDrainer) canPublish() bool {
	return len(d.inflight) < maxRecordsInFlight && !time.Now().Before(d.hold)
}

// fill publishes the records to retry, then new ones, while it may.
func (d *recordDrainer) fill() {
	if d.w.isStopping() && len(d.retry) > 0 {
		d.giveUpRetries()
	}
	for d.canPublish() && len(d.retry) > 0 {
		p := d.retry[len(d.retry)-1]
		d.retry = d.retry[:len(d.retry)-1]
		d.publish(p)
	}
	for d.canPublish() && d.in != nil {
		select {
		case p, open := <-d.in:
			if !open {
				d.in = nil
				return
			}
			d.publish(p)
		default:
			return
		}
	}
}

// publish sends one attempt of p without waiting for its ack.
func (d *recordDrainer) publish(p pendingRecord) {
	now := time.Now()
	if p.attempt == 0 {
		p.until = now.Add(recordRetryFor)
	}
	m := p.orig
	if p.attempt > 0 {
		// nats.go's PublishMsgAsync only sets the message id header on m
		// (the same one every time); a copy keeps the retries apart.
		m = copyMsg(p.orig)
	}
	p.attempt++
	p.deadline = now.Add(recordAckWait)
	p.paf, p.err = d.w.js.PublishMsgAsync(m, jetstream.WithMsgID(p.id))
	d.inflight = append(d.inflight, p)
}

// stored settles the oldest record in flight, acknowledged.
func (d *recordDrainer) stored() {
	p := d.pop()
	d.backoff = minRecordBackoff
	if p.attempt > 1 {
		d.w.log.Info("operation record stored after retry", "op_id", p.name.opID, "kind", p.name.kind, "attempts", p.attempt)
	}
	d.settle()
}

// failed handles the oldest record in flight, not acknowledged: it is
// given up on, or retried after a hold that every publish keeps.
func (d *recordDrainer) failed(err error) {
	p := d.pop()
	ctx := detached()
	if p.attempt == 1 {
		d.w.log.Warn("operation record not stored yet, retrying", "op_id", p.name.opID, "kind", p.name.kind, slog.Any("err", err))
	}
	if d.w.nc.IsClosed() || time.Now().After(p.until) || d.w.isStopping() {
		d.lost(p, err)
		return
	}
	d.w.metrics.recordsRetried.Add(ctx, 1)
	d.retry = append(d.retry, p)
	if now := time.Now(); !now.Before(d.hold) {
		d.hold = now.Add(d.backoff)
		d.backoff = min(2*d.backoff, maxRecordBackoff)
	}
}

func (d *recordDrainer) pop() pendingRecord {
	p := d.inflight[0]
	d.inflight[0] = pendingRecord{}
	d.inflight = d.inflight[1:]
	if len(d.inflight) == 0 {
		d.inflight = d.inflight[:0:0] // let the backing array go once drained
	}
	return p
}

// giveUpRetries counts every record waiting for a retry lost (the worker is
// stopping).
func (d *recordDrainer) giveUpRetries() {
	for _, p := range d.retry {
		d.lost(p, errWorkerShutdown)
	}
	d.retry = nil
}

func (d *recordDrainer) lost(p pendingRecord, err error) {
	d.w.log.Error("operation record lost", "op_id", p.name.opID, "kind", p.name.kind, "attempts", p.attempt, slog.Any("err", err))
	d.w.metrics.recordsLost.Add(detached(), 1)
	d.settle()
}

// settle ends the queue's hold on one record.
func (d *recordDrainer) settle() {
	d.w.unsettled.Add(-1)
	d.q.left()
}
