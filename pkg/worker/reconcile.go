package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// reconcile compares what the backend holds for this worker with what the
// worker tracks. At start-up it re-adopts sandboxes the registry says are
// running here and removes the rest; afterwards it removes any sandbox the
// worker does not track that is older than the creation grace (an orphan:
// a kill that failed, a record lost). Every removal is recorded as "reap".
func (w *Worker) reconcile(ctx context.Context, startup bool) error {
	lister, ok := w.backend.(Lister)
	if !ok {
		return nil
	}
	listed, err := lister.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	for _, l := range listed {
		if l.WorkerID != "" && l.WorkerID != w.cfg.WorkerID {
			continue
		}
		if w.lookup(l.SandboxID) != nil {
			continue // tracked
		}
		if !startup && !l.CreatedAt.IsZero() && time.Since(l.CreatedAt) < w.cfg.CreationGrace {
			continue
		}
		entry, err := w.registry.Get(ctx, l.SandboxID)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			// The registry cannot be read now (a leader election): decide on
			// the next pass rather than kill a sandbox that may be live.
			w.log.Warn("reconcile: registry unreadable", "sandbox_id", l.SandboxID, slog.Any("err", err))
			continue
		}
		var rec events.Sandbox
		if err == nil {
			_ = json.Unmarshal(entry.Value(), &rec)
		}
		if startup && err == nil && rec.State == events.StateRunning && rec.Worker == w.cfg.WorkerID && time.Now().Before(rec.Deadline) {
			sb := &sandbox{id: l.SandboxID, tenant: rec.Tenant, record: rec, revision: entry.Revision(), ready: true,
				procs: make(map[string]*process), secretsUnknown: rec.HasSecrets}
			sb.usage.restore(rec.Usage) // the shares go on from what the predecessor counted
			if keeper, ok := w.backend.(SecretKeeper); ok && sb.secretsUnknown {
				if values, known := keeper.SecretValues(ctx, sb.id); known {
					sb.secrets, sb.secretsUnknown = values, false
				}
			}
			sb.mu.Lock()
			w.armDeadline(sb)
			sb.mu.Unlock()
			w.track(sb)
			w.log.Info("sandbox re-adopted", "sandbox_id", sb.id)
			// Its processes died with the predecessor: end their streams.
			w.goTracked(func() { w.endLostProcesses(ctx, sb) })
			continue
		}
		w.reapOrphan(ctx, l, rec, entry)
	}
	return w.reconcileHost(ctx)
}

// reconcileHost removes sandboxes on this host whose worker is gone: no
// lease, and a record that has ended (the reaper marked them lost), past
// the creation grace.
func (w *Worker) reconcileHost(ctx context.Context) error {
	hl, ok := w.backend.(HostLister)
	if !ok {
		return nil
	}
	listed, err := hl.ListHostSandboxes(ctx)
	if err != nil {
		return err
	}
	leaseChecked := map[string]bool{} // worker -> lease alive
	for _, l := range listed {
		if l.WorkerID == "" || l.WorkerID == w.cfg.WorkerID || w.lookup(l.SandboxID) != nil {
			continue
		}
		if !l.CreatedAt.IsZero() && time.Since(l.CreatedAt) < w.cfg.CreationGrace {
			continue
		}
		alive, seen := leaseChecked[l.WorkerID]
		if !seen {
			_, err := w.leases.Get(ctx, events.WorkerKey(w.info.Name, l.WorkerID))
			if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // cannot tell now
			}
			alive = err == nil
			leaseChecked[l.WorkerID] = alive
		}
		if alive {
			continue
		}
		// Only a sandbox this deployment's registry knows, and knows to have
		// ended: a container of another deployment sharing the daemon has
		// no record here and is never touched.
		entry, err := w.registry.Get(ctx, l.SandboxID)
		if err != nil {
			continue
		}
		var rec events.Sandbox
		if json.Unmarshal(entry.Value(), &rec) != nil || !rec.State.Ended() {
			continue // the reaper has not called it lost yet
		}
		w.reapOrphan(ctx, l, rec, entry)
	}
	return nil
}

// reapOrphan removes a sandbox the worker does not track and records it.
func (w *Worker) reapOrphan(ctx context.Context, l Listed, rec events.Sandbox, entry jetstream.KeyValueEntry) {
	reason := "untracked by its worker"
	if rec.State.Ended() {
		reason = "record says " + string(rec.State)
	}
	w.log.Info("removing untracked sandbox", "sandbox_id", l.SandboxID, "reason", reason)
	op := w.openOpAnyway(ctx, "reap", events.NewID(), l.SandboxID, rec.Owner, "", redaction{}, map[string]string{"reason": reason})
	kctx, cancel := context.WithTimeout(ctx, w.cfg.KillTimeout)
	defer cancel()
	if err := w.backend.Kill(kctx, l.SandboxID); err != nil {
		w.log.Warn("remove untracked sandbox", "sandbox_id", l.SandboxID, slog.Any("err", err))
		op.close(classify(err))
		return
	}
	if entry != nil && !rec.State.Ended() && rec.State != events.StatePaused { // a paused one lives on in its snapshot
		ghost := &sandbox{id: l.SandboxID, record: rec, revision: entry.Revision()}
		w.markGone(kctx, ghost, "reaped: "+reason)
	}
	op.close(nil)
}
