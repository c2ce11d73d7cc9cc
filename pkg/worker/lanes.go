package worker

import (
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Stdin and signal commands of one sandbox must keep their order (writes to
// a process's stdin, a TERM after the data it follows) but must not wait
// on another sandbox's: each sandbox has its own lane, a small queue with
// one goroutine, which ends once the lane has been idle for laneIdle. A
// slow sandbox (a signal that takes its time, a registry lookup for an
// unknown one) stalls only its own lane.
const (
	laneDepth = 256  // commands queued per sandbox before Overloaded
	maxLanes  = 4096 // sandboxes with a busy lane at once
	laneIdle  = 5 * time.Second
)

type lanes struct {
	mu sync.Mutex
	m  map[string]chan func()
}

// enqueue runs f on the lane of sandbox id, after what is queued there. It
// never blocks: a full lane, or too many lanes, is Overloaded.
func (w *Worker) enqueue(id string, f func()) *events.Error {
	l := &w.lanes
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.m[id]
	if !ok {
		if len(l.m) >= maxLanes {
			return events.Errorf(events.CodeOverloaded, "worker %s has %d sandboxes with stdin or signals queued", w.cfg.WorkerID, maxLanes)
		}
		if l.m == nil {
			l.m = make(map[string]chan func())
		}
		ch = make(chan func(), laneDepth)
		l.m[id] = ch
		w.goTracked(func() { w.runLane(id, ch) })
	}
	select {
	case ch <- f:
		return nil
	default:
		return events.Errorf(events.CodeOverloaded, "sandbox %s has %d stdin or signal commands queued", id, laneDepth)
	}
}

// runLane runs a lane's commands in order until it is idle or the worker
// stops; a lane that ends with work queued (stopping) runs it first.
func (w *Worker) runLane(id string, ch chan func()) {
	t := time.NewTimer(laneIdle)
	defer t.Stop()
	for {
		select {
		case f := <-ch:
			f()
			t.Reset(laneIdle)
			continue
		case <-t.C:
		case <-w.stopping:
		}
		w.lanes.mu.Lock()
		if len(ch) > 0 {
			w.lanes.mu.Unlock()
			t.Reset(laneIdle)
			continue
		}
		delete(w.lanes.m, id)
		w.lanes.mu.Unlock()
		return
	}
}
