package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func (w *Worker) handleKill(id string, sb *sandbox, env cemsg.Envelope) (any, *events.Error) {
	if sb == nil {
		// Not ours in memory: already gone, or held by the backend without a
		// live record here (a restart). Make sure and confirm.
		ctx, cancel := context.WithTimeout(detached(), w.cfg.KillTimeout)
		defer cancel()
		entry, err := w.registry.Get(ctx, id)
		if err != nil {
			return nil, events.Errorf(events.CodeSandboxNotFound, "no sandbox %s", id)
		}
		var rec events.Sandbox
		_ = json.Unmarshal(entry.Value(), &rec)
		if rec.State.Ended() {
			return events.KillReply{SandboxID: id, State: rec.State, AlreadyGone: true}, nil
		}
		// A kill that does something is recorded like any other (an
		// acknowledged kill without records was seen after a worker died
		// mid-kill and its same-id successor took the retry).
		op := w.openOpAnyway(ctx, events.OpKill, env.ID, id, rec.Owner, env.Traceparent, redaction{withhold: true},
			map[string]string{"reason": "killed", "held": "no"})
		if err := w.backend.Kill(ctx, id); err != nil {
			e := classify(err)
			if op != nil {
				op.close(e)
			}
			return nil, e
		}
		ghost := &sandbox{id: id, record: rec, revision: entry.Revision()}
		w.markGone(ctx, ghost, "killed")
		w.killedPaused(ctx, rec) // a paused sandbox's snapshot goes with it (durable.go)
		if op != nil {
			op.close(nil)
		}
		return events.KillReply{SandboxID: id, State: events.StateGone}, nil
	}
	already, e := w.kill(sb, "killed", env.ID, env.Traceparent)
	if e != nil {
		return nil, e
	}
	return events.KillReply{SandboxID: id, State: events.StateGone, AlreadyGone: already}, nil
}

func (w *Worker) handleSetTimeout(sb *sandbox, env cemsg.Envelope, r *events.SetTimeoutRequest) (any, *events.Error) {
	if limit := int(w.cfg.MaxLifetime / time.Second); r.TimeoutS > limit {
		return nil, events.Errorf(events.CodeInvalidValue, "timeout_s %d exceeds this worker's maximum lifetime of %d s", r.TimeoutS, limit).
			With("field", "timeout_s").With("limit", limit)
	}
	deadline := time.Now().UTC().Add(time.Duration(r.TimeoutS) * time.Second)
	return w.recorded(sb, env, events.OpSetTimeout, map[string]string{"deadline": deadline.Format(time.RFC3339)}, func(*opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), 30*time.Second)
		defer cancel()
		if ts, ok := w.backend.(TimeoutSetter); ok {
			if err := ts.SetTimeout(ctx, sb.id, deadline); err != nil {
				return nil, classify(err)
			}
		}
		// The registry write is made outside sb.mu; sb.regMu keeps it in
		// order with a kill's.
		sb.regMu.Lock()
		defer sb.regMu.Unlock()
		sb.mu.Lock()
		if sb.gone || sb.killWait != nil {
			sb.mu.Unlock()
			return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is being killed", sb.id)
		}
		rec, rev := sb.record, sb.revision
		sb.mu.Unlock()
		rec.Deadline = deadline
		next, err := w.putRecord(ctx, rec, rev)
		if err != nil {
			return nil, events.Errorf(events.CodeBackendUnavailable, "registry update failed: %v", err)
		}
		sb.mu.Lock()
		defer sb.mu.Unlock()
		sb.record.Deadline, sb.revision = deadline, next
		if !sb.gone && sb.killWait == nil {
			w.armDeadline(sb)
		}
		return events.SetTimeoutReply{SandboxID: sb.id, Deadline: deadline}, nil
	})
}

// markGone writes the ended state and reports whether it was written. It
// must be called without sb.mu (no registry round-trip is made under it);
// sb.regMu orders it with the sandbox's other registry writes.
func (w *Worker) markGone(ctx context.Context, sb *sandbox, reason string) bool {
	sb.regMu.Lock()
	defer sb.regMu.Unlock()
	now := time.Now().UTC()
	sb.mu.Lock()
	sb.record.State = events.StateGone
	sb.record.EndedAt = &now
	sb.record.EndReason = reason
	rec, rev := sb.record, sb.revision
	sb.mu.Unlock()
	for attempt := 0; attempt < 3; attempt++ {
		next, err := w.putRecord(ctx, rec, rev)
		if err == nil {
			sb.mu.Lock()
			sb.revision = next
			sb.mu.Unlock()
			return true
		}
		// Someone else wrote (a router tombstone, the reaper): read and retry.
		entry, gerr := w.registry.Get(ctx, sb.id)
		if gerr != nil {
			w.log.Warn("registry update failed", "sandbox_id", sb.id, slog.Any("err", err))
			return false
		}
		if !sameClaim(entry.Value(), rec) {
			// A retry of the create took the id over (ADR 37): the record
			// is its sandbox's now, not this one's to end.
			w.log.Info("record not ended: its id was claimed again", "sandbox_id", sb.id)
			return true
		}
		rev = entry.Revision()
		sb.mu.Lock()
		sb.revision = rev
		sb.mu.Unlock()
	}
	return false
}

// armDeadline schedules the kill at the deadline; sb.mu must be held.
func (w *Worker) armDeadline(sb *sandbox) {
	w.armKill(sb, time.Until(sb.record.Deadline), "sandbox deadline reached")
}

// Failed deadline kills are retried after deadlineRetryBase, doubling up to
// deadlineRetryMax; the reaper and the backend's own janitor are the
// backstops.
const (
	deadlineRetryBase = 10 * time.Second
	deadlineRetryMax  = 5 * time.Minute
)

// deadlineRetryDelay is the wait before the n-th retry (n from 1).
func deadlineRetryDelay(n int) time.Duration {
	d := deadlineRetryBase
	for i := 1; i < n && d < deadlineRetryMax; i++ {
		d *= 2
	}
	return min(d, deadlineRetryMax)
}

// armKill schedules a deadline kill after d; sb.mu must be held. Once the
// worker stops its timers nothing is armed again: a timer firing during
// shutdown would start work nobody waits for.
func (w *Worker) armKill(sb *sandbox, d time.Duration, why string) {
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	if w.timersOff.Load() {
		return
	}
	sb.timer = time.AfterFunc(d, func() {
		if w.timersOff.Load() {
			return
		}
		w.goTracked(func() {
			w.log.Info(why, "sandbox_id", sb.id)
			w.deadlineReached(sb)
		})
	})
}

func (w *Worker) stopTimers() {
	w.timersOff.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, sb := range w.sandboxes {
		sb.mu.Lock()
		if sb.timer != nil {
			sb.timer.Stop()
		}
		sb.mu.Unlock()
	}
}

func (w *Worker) killAll(reason string) {
	w.mu.Lock()
	all := slices.Collect(maps.Values(w.sandboxes))
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.kill(sb, reason, "", "")
		}()
	}
	wg.Wait()
}

// kill removes a sandbox once; concurrent kills wait for the first. It
// returns whether the sandbox was already gone.
func (w *Worker) kill(sb *sandbox, reason, opID, traceparent string) (bool, *events.Error) {
	sb.mu.Lock()
	if sb.gone {
		sb.mu.Unlock()
		return true, nil
	}
	if wait := sb.killWait; wait != nil {
		sb.mu.Unlock()
		<-wait
		sb.mu.Lock()
		defer sb.mu.Unlock()
		if sb.gone {
			return true, nil
		}
		return false, sb.killErr
	}
	if sb.cancelCreate != nil && !sb.ready {
		// Creating: abort it; the create path cleans up and marks it gone.
		sb.cancelCreate()
		done := sb.createDone
		sb.mu.Unlock()
		select {
		case <-done:
		case <-time.After(w.cfg.CreateTimeout + w.cfg.KillTimeout):
			return false, events.Errorf(events.CodeBackendError, "the create of %s did not stop", sb.id)
		}
		return false, nil
	}
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.killWait = make(chan struct{})
	procs := slices.Collect(maps.Values(sb.procs))
	sb.mu.Unlock()
	for _, p := range procs {
		p.cancel(errSandboxKilled)
	}
	if opID == "" {
		opID = events.NewID()
	}
	op := w.openOpAnyway(detached(), events.OpKill, opID, sb.id, sb.record.Owner, traceparent, sb.redaction(),
		map[string]string{"reason": reason})
	kctx, cancel := context.WithTimeout(detached(), w.cfg.KillTimeout)
	defer cancel()
	var e *events.Error
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		e = classify(err)
		sb.mu.Lock()
		sb.killErr = e
		close(sb.killWait)
		sb.killWait = nil
		if reason == "deadline" {
			// Try again later, backing off; the reaper is the backstop.
			sb.killRetries++
			d := deadlineRetryDelay(sb.killRetries)
			w.log.Warn("deadline kill failed, retrying", "sandbox_id", sb.id, "attempt", sb.killRetries, "retry_in", d, slog.Any("err", err))
			w.armKill(sb, d, "retrying the deadline kill")
		} else {
			w.armDeadline(sb)
		}
		sb.mu.Unlock()
		op.close(e)
		return false, e // not marked gone: a retry or the reaper tries again
	}
	w.markGone(kctx, sb, reason)
	sb.mu.Lock()
	sb.gone, sb.killErr = true, nil
	close(sb.killWait)
	sb.killWait = nil
	sb.mu.Unlock()
	w.forget(sb.id)
	op.close(nil)
	return false, nil
}
