package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// sandbox is a sandbox this worker owns.
type sandbox struct {
	id      string
	tenant  string // subject token of the sandbox's tenant; set at create or re-adoption
	secrets []string

	mu       sync.Mutex
	record   events.Sandbox
	revision uint64
	ready    bool // Create returned and the record says running
	timer    *time.Timer
	procs    map[string]*process
	usedPIDs map[string]struct{}
	// secretsUnknown is set on a sandbox re-adopted after a restart: its
	// secret values are gone with the old worker, so records of it leave
	// out what could hold one.
	secretsUnknown bool
	// cancelCreate aborts a create still in progress when a kill arrives;
	// createDone is closed when the create path has finished either way.
	cancelCreate context.CancelFunc
	createDone   chan struct{}
	// gone is set once the backend confirmed removal. killWait is non-nil
	// while a kill runs; concurrent kills wait for it and read killErr.
	gone     bool
	killWait chan struct{}
	killErr  *events.Error
}

func (sb *sandbox) redaction() redaction {
	return redaction{secrets: sb.secrets, withhold: sb.secretsUnknown}
}

func (w *Worker) lookup(id string) *sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandboxes[id]
}

func (w *Worker) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.sandboxes, id)
}

// onCreate handles one create from the pool consumer.
func (w *Worker) onCreate(msg jetstream.Msg) {
	env, err := cemsg.Decode(msg.Headers(), msg.Data())
	if err != nil {
		w.log.Warn("malformed create command dropped", slog.Any("err", err))
		_ = msg.Term()
		return
	}
	var cmd events.CreateCommand
	jerr := json.Unmarshal(env.Data, &cmd)
	if jerr != nil {
		cmd = events.CreateCommand{}
	}
	// First who sent it: a command not signed by a trusted commander is
	// refused whatever it says.
	if e := w.checkSigner(msg.Subject(), msg.Headers(), msg.Data()); e != nil {
		w.refuseCreate(msg, env, cmd, e)
		return
	}
	if jerr != nil {
		w.refuseCreate(msg, env, events.CreateCommand{}, events.Errorf(events.CodeInvalidRequest, "malformed create command"))
		return
	}
	// Whoever published it, the command is checked against this worker's
	// own limits before anything is claimed or created.
	secrets, tenant, e := w.checkCreate(&cmd, time.Now())
	if e != nil {
		w.refuseCreate(msg, env, cmd, e)
		return
	}
	cmd.Tenant = tenant
	// Start with a slot; a worker that is full leaves the create to another
	// (or to itself, shortly), and on the last delivery says so.
	select {
	case w.slots <- struct{}{}:
	default:
		if md, err := msg.Metadata(); err == nil && md.NumDelivered >= poolMaxDeliver {
			w.reply(env.ReplyTo, nil, events.Errorf(events.CodeOverloaded, "every %s worker is at its limit", w.info.Name))
			_ = msg.Term()
			return
		}
		_ = msg.NakWithDelay(250 * time.Millisecond)
		return
	}
	w.goTracked(func() {
		defer w.release()
		w.create(msg, env, cmd, secrets)
	})
}

// refuseCreate answers a create that failed the worker's checks, records
// the refusal (opened and closed at once, with the error) and drops the
// command: nothing is claimed or created.
func (w *Worker) refuseCreate(msg jetstream.Msg, env cemsg.Envelope, cmd events.CreateCommand, e *events.Error) {
	sandboxID := ""
	if events.ValidID(cmd.SandboxID) {
		sandboxID = cmd.SandboxID
	}
	// Only the code and the field: the message may quote the command.
	field, _ := e.Details["field"].(string)
	w.log.Warn("create refused", "op_id", truncate(env.ID), "sandbox_id", sandboxID, "code", e.Code, "field", field)
	owner := cmd.Request.Owner
	if len(owner) > 256 {
		owner = owner[:256]
	}
	red := redaction{secrets: slices.Collect(maps.Values(cmd.Request.Secrets))}
	op, _ := w.openOp(context.Background(), events.OpCreate, env.ID, sandboxID, owner, env.Traceparent, red,
		map[string]string{"class": truncate(cmd.Spec.Name), "refused": string(e.Code)})
	op.close(e)
	w.reply(env.ReplyTo, nil, e)
	_ = msg.Term()
}

// create claims and creates a sandbox; secretMap holds the secrets opened
// by checkCreate (never cmd.Request's).
func (w *Worker) create(msg jetstream.Msg, env cemsg.Envelope, cmd events.CreateCommand, secretMap map[string]string) {
	log := w.log.With("sandbox_id", cmd.SandboxID, "op_id", env.ID)
	now := time.Now().UTC()
	isolation := w.info.Isolation
	if t, ok := w.runtimes[cmd.Spec.Runtime]; ok && cmd.Spec.Runtime != "" {
		isolation = t
	}
	rec := events.Sandbox{
		SandboxID: cmd.SandboxID, Backend: w.info.Name, Worker: w.cfg.WorkerID, Class: cmd.Spec.Name,
		State: events.StateCreating, Isolation: isolation, Capabilities: w.info.Capabilities,
		Owner: cmd.Request.Owner, Tenant: cmd.Tenant, Metadata: cmd.Request.Metadata, CreatedAt: now, Deadline: cmd.Deadline,
		CreateOp: env.ID, HasSecrets: len(secretMap) > 0,
	}
	ctx := context.Background()
	rev, err := w.putRecord(ctx, rec, 0)
	if err != nil {
		w.createConflict(msg, env, cmd, err)
		return
	}
	secrets := slices.Collect(maps.Values(secretMap))
	sb := &sandbox{id: cmd.SandboxID, tenant: rec.Tenant, secrets: secrets, record: rec, revision: rev,
		procs: make(map[string]*process), usedPIDs: make(map[string]struct{}), createDone: make(chan struct{})}
	defer close(sb.createDone)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CreateTimeout)
	defer cancel()
	sb.cancelCreate = cancel
	w.mu.Lock()
	w.sandboxes[sb.id] = sb
	w.mu.Unlock()

	op, aerr := w.openOp(ctx, events.OpCreate, env.ID, sb.id, rec.Owner, env.Traceparent, redaction{secrets: secrets},
		map[string]string{"class": cmd.Spec.Name, "image": cmd.Spec.Image + cmd.Spec.Template, "deadline": cmd.Deadline.Format(time.RFC3339)})
	if aerr != nil {
		w.abortCreate(sb, op, "audit unavailable")
		w.reply(env.ReplyTo, nil, aerr)
		_ = msg.Term()
		return
	}

	// Keep the command from being redelivered while the backend works.
	stopProgress := make(chan struct{})
	w.goTracked(func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	})
	progressSubject := events.ProgressSubject(sb.tenantToken(), sb.id)
	pctx := WithProgress(cctx, func(msg string) {
		_ = w.nc.Publish(progressSubject, []byte(Redact(msg, secrets)))
	})
	created, berr := w.backend.Create(pctx, CreateSpec{
		SandboxID: sb.id, WorkerID: w.cfg.WorkerID, Owner: rec.Owner, Spec: cmd.Spec,
		Env: cmd.Request.Env, Secrets: secretMap, Network: derefNetwork(cmd.Request.Network),
		Resources: mergeResources(cmd.Spec.Resources, cmd.Request.Resources), Metadata: cmd.Request.Metadata,
		Deadline: cmd.Deadline,
	})
	close(stopProgress)
	if berr != nil {
		var e *events.Error
		switch {
		case errors.Is(cctx.Err(), context.DeadlineExceeded):
			e = events.Errorf(events.CodeCreateTimeout, "sandbox not ready within %s", w.cfg.CreateTimeout)
		case errors.Is(cctx.Err(), context.Canceled):
			e = events.Errorf(events.CodeSandboxGone, "sandbox was killed while it was being created")
		default:
			e = classify(berr)
			if e.Code == events.CodeBackendError {
				e = events.Errorf(events.CodeCreateFailed, "%s", Redact(e.Message, secrets))
			}
		}
		log.Info("create failed", "code", e.Code, slog.Any("err", Redact(berr.Error(), secrets)))
		w.abortCreate(sb, op, "create failed: "+string(e.Code))
		w.reply(env.ReplyTo, nil, e)
		_ = msg.Term()
		return
	}

	sb.mu.Lock()
	killed := sb.gone || sb.killWait != nil
	if !killed && cctx.Err() == nil {
		sb.record.State = events.StateRunning
		sb.record.Image = created.Image
		rev, err = w.putRecord(ctx, sb.record, sb.revision)
		if err == nil {
			sb.revision = rev
			sb.ready = true
			sb.cancelCreate = nil
			w.armDeadline(sb)
		}
	}
	ready := sb.ready
	sb.mu.Unlock()
	if !ready {
		// A kill arrived while the backend worked, or the record changed
		// under us: the sandbox must not survive.
		log.Info("create abandoned", slog.Any("err", err))
		w.abortCreate(sb, op, "killed during create")
		w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxGone, "sandbox was killed while it was being created"))
		_ = msg.Term()
		return
	}
	op.close(nil)
	log.Debug("sandbox created")
	w.reply(env.ReplyTo, w.createReply(sb.record, created.Warnings), nil)
	_ = msg.Ack()
}

func (w *Worker) createReply(r events.Sandbox, warnings []string) events.CreateReply {
	if w.info.Isolation == events.TierUnknown {
		warnings = append(warnings, "backend isolation tier is unknown: no isolation guarantee")
	}
	return events.CreateReply{SandboxID: r.SandboxID, Backend: r.Backend, Class: r.Class, Isolation: r.Isolation,
		Capabilities: r.Capabilities, Deadline: r.Deadline, Warnings: warnings}
}

// createConflict handles a create whose registry claim failed: a redelivery
// of a create this worker finished, another worker's claim, a client-chosen
// id in use, or a sandbox killed before it was created.
func (w *Worker) createConflict(msg jetstream.Msg, env cemsg.Envelope, cmd events.CreateCommand, claimErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entry, err := w.registry.Get(ctx, cmd.SandboxID)
	if err != nil {
		w.log.Warn("registry claim failed", "sandbox_id", cmd.SandboxID, slog.Any("err", claimErr))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	var existing events.Sandbox
	_ = json.Unmarshal(entry.Value(), &existing)
	switch {
	case existing.CreateOp == env.ID && existing.Worker == w.cfg.WorkerID && existing.State == events.StateRunning:
		w.reply(env.ReplyTo, w.createReply(existing, nil), nil) // redelivery after we finished
		_ = msg.Ack()
	case existing.CreateOp == env.ID:
		_ = msg.Term() // the worker that claimed it answers
	case existing.State.Ended():
		w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s was killed before it was created", cmd.SandboxID))
		_ = msg.Term()
	default:
		w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxExists, "sandbox %s already exists", cmd.SandboxID))
		_ = msg.Term()
	}
}

// abortCreate removes whatever a failed create left and marks it gone.
func (w *Worker) abortCreate(sb *sandbox, op *opRecord, reason string) {
	kctx, cancel := context.WithTimeout(context.Background(), w.cfg.KillTimeout)
	defer cancel()
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		w.log.Warn("cleanup after failed create", "sandbox_id", sb.id, slog.Any("err", err))
	}
	sb.mu.Lock()
	w.markGone(kctx, sb, reason)
	sb.mu.Unlock()
	w.forget(sb.id)
	if op != nil {
		op.close(events.Errorf(events.CodeCreateFailed, "%s", reason))
	}
}

// markGone writes the ended state; sb.mu must be held.
func (w *Worker) markGone(ctx context.Context, sb *sandbox, reason string) {
	now := time.Now().UTC()
	sb.record.State = events.StateGone
	sb.record.EndedAt = &now
	sb.record.EndReason = reason
	for attempt := 0; attempt < 3; attempt++ {
		rev, err := w.putRecord(ctx, sb.record, sb.revision)
		if err == nil {
			sb.revision = rev
			return
		}
		// Someone else wrote (a router tombstone, the reaper): read and retry.
		entry, gerr := w.registry.Get(ctx, sb.id)
		if gerr != nil {
			w.log.Warn("registry update failed", "sandbox_id", sb.id, slog.Any("err", err))
			return
		}
		sb.revision = entry.Revision()
	}
}

// putRecord claims (revision 0) or updates the registry record.
func (w *Worker) putRecord(ctx context.Context, r events.Sandbox, revision uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if revision == 0 {
		return w.registry.Create(ctx, r.SandboxID, b)
	}
	return w.registry.Update(ctx, r.SandboxID, b, revision)
}

// armDeadline schedules the kill at the deadline; sb.mu must be held.
func (w *Worker) armDeadline(sb *sandbox) {
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.timer = time.AfterFunc(time.Until(sb.record.Deadline), func() {
		w.goTracked(func() {
			w.log.Info("sandbox deadline reached", "sandbox_id", sb.id)
			w.kill(sb, "deadline", "", "")
		})
	})
}

func (w *Worker) stopTimers() {
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
	op, _ := w.openOp(context.Background(), events.OpKill, opID, sb.id, sb.record.Owner, traceparent, sb.redaction(),
		map[string]string{"reason": reason})
	kctx, cancel := context.WithTimeout(context.Background(), w.cfg.KillTimeout)
	defer cancel()
	var e *events.Error
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		e = classify(err)
		sb.mu.Lock()
		sb.killErr = e
		close(sb.killWait)
		sb.killWait = nil
		if reason == "deadline" {
			// Try again shortly; the reaper is the backstop.
			sb.timer = time.AfterFunc(10*time.Second, func() { w.goTracked(func() { w.kill(sb, "deadline", "", "") }) })
		} else {
			w.armDeadline(sb)
		}
		sb.mu.Unlock()
		op.close(e)
		return false, e // not marked gone: a retry or the reaper tries again
	}
	sb.mu.Lock()
	w.markGone(kctx, sb, reason)
	sb.gone, sb.killErr = true, nil
	close(sb.killWait)
	sb.killWait = nil
	sb.mu.Unlock()
	w.forget(sb.id)
	op.close(nil)
	return false, nil
}

func derefNetwork(p *events.NetworkPolicy) events.NetworkPolicy {
	if p == nil {
		return events.NetworkPolicy{Egress: events.EgressDeny}
	}
	n := *p
	if n.Egress == "" {
		n.Egress = events.EgressDeny
	}
	return n
}

func mergeResources(class, req *events.Resources) events.Resources {
	var r events.Resources
	if class != nil {
		r = *class
	}
	if req != nil {
		if req.CPUs != 0 {
			r.CPUs = req.CPUs
		}
		if req.MemoryMB != 0 {
			r.MemoryMB = req.MemoryMB
		}
		if req.PIDs != 0 {
			r.PIDs = req.PIDs
		}
		if req.DiskMB != 0 {
			r.DiskMB = req.DiskMB
		}
	}
	return r
}

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
				procs: make(map[string]*process), usedPIDs: make(map[string]struct{}), secretsUnknown: rec.HasSecrets}
			if keeper, ok := w.backend.(SecretKeeper); ok && sb.secretsUnknown {
				if values, known := keeper.SecretValues(ctx, sb.id); known {
					sb.secrets, sb.secretsUnknown = values, false
				}
			}
			sb.mu.Lock()
			w.armDeadline(sb)
			sb.mu.Unlock()
			w.mu.Lock()
			w.sandboxes[sb.id] = sb
			w.mu.Unlock()
			w.log.Info("sandbox re-adopted", "sandbox_id", sb.id)
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
	op, _ := w.openOp(ctx, "reap", events.NewID(), l.SandboxID, rec.Owner, "", redaction{}, map[string]string{"reason": reason})
	kctx, cancel := context.WithTimeout(ctx, w.cfg.KillTimeout)
	defer cancel()
	if err := w.backend.Kill(kctx, l.SandboxID); err != nil {
		w.log.Warn("remove untracked sandbox", "sandbox_id", l.SandboxID, slog.Any("err", err))
		op.close(classify(err))
		return
	}
	if entry != nil && !rec.State.Ended() {
		ghost := &sandbox{id: l.SandboxID, record: rec, revision: entry.Revision()}
		w.markGone(kctx, ghost, "reaped: "+reason)
	}
	op.close(nil)
}

// tenantToken is the tenant token of the sandbox's subjects: the record's
// tenant, or TenantOpen for sandboxes created without one.
func (sb *sandbox) tenantToken() string {
	if sb.tenant != "" {
		return sb.tenant
	}
	return events.TenantOpen
}
