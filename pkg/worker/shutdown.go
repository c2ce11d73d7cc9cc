package worker

import (
	"errors"
	"time"
)

// errWorkerShutdown is the cause of a process stopped because the worker
// is shutting down and its grace ran out.
var errWorkerShutdown = errors.New("worker shutting down")

// drainAfterStop bounds the wait, after the processes were stopped, for
// their goroutines to publish their last output, exit markers and records.
const drainAfterStop = 5 * time.Second

// drain waits for the operations in flight, at most ShutdownGrace; then it
// stops every process and every create still running (their callers get
// SBX_E1620 WorkerShutdown) and waits a little more. It never waits without
// bound: a second signal is not needed to stop a worker.
func (w *Worker) drain() {
	empty := w.goroutines.close()
	if waitClosed(empty, w.cfg.ShutdownGrace) {
		return
	}
	n := w.stopInFlight()
	w.log.Warn("operations still running after the shutdown grace: stopped", "grace", w.cfg.ShutdownGrace, "stopped", n)
	if !waitClosed(empty, drainAfterStop) {
		w.log.Error("operations did not end after they were stopped; exiting anyway", "wait", drainAfterStop)
	}
}

// stopInFlight cancels every running process and create with
// errWorkerShutdown and returns how many it stopped.
func (w *Worker) stopInFlight() int {
	w.mu.Lock()
	all := make([]*sandbox, 0, len(w.sandboxes))
	for _, sb := range w.sandboxes {
		all = append(all, sb)
	}
	w.mu.Unlock()
	n := 0
	for _, sb := range all {
		sb.mu.Lock()
		for _, p := range sb.procs {
			p.cancel(errWorkerShutdown)
			n++
		}
		if sb.cancelCreate != nil && !sb.ready {
			sb.cancelCreate()
			n++
		}
		sb.mu.Unlock()
	}
	return n
}
