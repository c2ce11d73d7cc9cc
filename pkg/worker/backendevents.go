package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// watchDeaths registers the runtime's handler with a backend that reports
// sandboxes dying on their own; the returned func unregisters it.
func (w *Worker) watchDeaths() func() {
	dw, ok := w.backend.(DeathWatcher)
	if !ok {
		return func() {}
	}
	dw.OnSandboxDeath(w.sandboxDied)
	return func() { dw.OnSandboxDeath(nil) }
}

// sandboxDied handles a backend's report that a sandbox died outside Kill:
// its processes fail with SandboxGone at once (kill cancels them), what is
// left is removed and the registry says gone, with the reason.
func (w *Worker) sandboxDied(id, reason string) {
	if w.isStopping() {
		return // the successor's reconcile finds it
	}
	sb := w.lookup(id)
	if sb == nil {
		return
	}
	w.log.Warn("sandbox died outside a kill", "sandbox_id", id, "reason", reason)
	w.goTracked(func() {
		if _, e := w.kill(sb, "died: "+truncate(reason), "", ""); e != nil {
			w.log.Warn("remove a dead sandbox", "sandbox_id", id, "code", e.Code)
		}
	})
}

// watchReaps registers the runtime's handler with a backend whose janitor
// removes sandboxes on its own; the returned func unregisters it.
func (w *Worker) watchReaps() func() {
	j, ok := w.backend.(Janitor)
	if !ok {
		return func() {}
	}
	j.OnReap(w.janitorReaped)
	return func() { j.OnReap(nil) }
}

// janitorReaped records a removal by the backend's janitor: a "reap"
// operation, and the ended state in the registry when this deployment
// knows the sandbox and still thinks it alive. A sandbox this worker
// tracks goes through kill (its processes end, its record closes).
func (w *Worker) janitorReaped(r Reaped) {
	if w.isStopping() {
		return
	}
	reason := "janitor: " + truncate(r.Reason)
	if sb := w.lookup(r.SandboxID); sb != nil {
		w.goTracked(func() { w.kill(sb, reason, "", "") })
		return
	}
	ctx, cancel := context.WithTimeout(detached(), 5*time.Second)
	defer cancel()
	var rec events.Sandbox
	entry, err := w.registry.Get(ctx, r.SandboxID)
	if err == nil && json.Unmarshal(entry.Value(), &rec) != nil {
		entry = nil
	}
	op := w.openOpAnyway(ctx, "reap", events.NewID(), r.SandboxID, rec.Owner, "", redaction{},
		map[string]string{"reason": reason, "worker": truncate(r.WorkerID), "deadline": r.Deadline.UTC().Format(time.RFC3339)})
	if err == nil && entry != nil && !rec.State.Ended() {
		w.markGone(ctx, &sandbox{id: r.SandboxID, record: rec, revision: entry.Revision()}, "reaped: "+reason)
	}
	op.close(nil)
}
