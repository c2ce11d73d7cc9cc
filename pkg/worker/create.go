package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

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
	op := w.openOpAnyway(detached(), events.OpCreate, env.ID, sandboxID, owner, env.Traceparent, red,
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
		CreateOp: env.ID, HasSecrets: len(secretMap) > 0, SpecHash: cmd.SpecHash, Durable: durableOf(cmd),
	}
	ctx := detached()
	w.beginClaim(cmd.SandboxID)
	var rev uint64
	var err error
	var resumeFrom *events.Sandbox
	if cmd.Resume {
		var e *events.Error
		if rev, resumeFrom, e = w.claimResume(ctx, cmd, &rec); e != nil {
			w.endClaim(cmd.SandboxID)
			w.reply(env.ReplyTo, nil, e)
			_ = msg.Term()
			return
		}
	} else {
		rev, err = w.putRecord(ctx, rec, 0)
	}
	if err != nil {
		w.endClaim(cmd.SandboxID)
		var goOn bool
		if rev, goOn = w.createConflict(msg, env, cmd, rec, err); !goOn {
			return // answered; a take-over holds beginClaim
		}
	}
	secrets := slices.Collect(maps.Values(secretMap))
	sb := &sandbox{id: cmd.SandboxID, tenant: rec.Tenant, secrets: secrets, record: rec, revision: rev,
		procs: make(map[string]*process), createDone: make(chan struct{}), createCmd: &cmd, resumeFrom: resumeFrom}
	defer close(sb.createDone)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CreateTimeout)
	defer cancel()
	sb.cancelCreate = cancel
	w.track(sb)
	w.endClaim(cmd.SandboxID)

	op, aerr := w.openOp(ctx, events.OpCreate, env.ID, sb.id, rec.Owner, env.Traceparent, redaction{secrets: secrets},
		durableSummary(cmd, map[string]string{"class": cmd.Spec.Name, "image": cmd.Spec.Image + cmd.Spec.Template, "deadline": cmd.Deadline.Format(time.RFC3339)}))
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
	if berr == nil && cmd.Request.FromSnapshot != "" {
		if e := w.restoreSnapshot(cctx, sb, cmd, created.Image); e != nil {
			log.Info("restore failed", "code", e.Code)
			w.abortCreate(sb, op, "restore failed: "+string(e.Code))
			w.reply(env.ReplyTo, nil, e)
			_ = msg.Term()
			return
		}
	}
	if berr != nil {
		var e *events.Error
		switch {
		case errors.Is(cctx.Err(), context.DeadlineExceeded):
			e = events.Errorf(events.CodeCreateTimeout, "sandbox not ready within %s", w.cfg.CreateTimeout)
		case errors.Is(cctx.Err(), context.Canceled) && w.isStopping():
			e = events.Errorf(events.CodeWorkerShutdown, "worker %s shut down while the sandbox was being created", w.cfg.WorkerID)
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

	// Running: written outside sb.mu (no registry round-trip under it),
	// then applied only if no kill came meanwhile (a kill of a creating
	// sandbox cancels cctx and waits for createDone).
	sb.regMu.Lock()
	sb.mu.Lock()
	killed := sb.gone || sb.killWait != nil || cctx.Err() != nil
	running, rev0 := sb.record, sb.revision
	sb.mu.Unlock()
	var werr error // the write of running, when it failed
	if !killed {
		started := time.Now().UTC()
		running.State, running.Image, running.StartedAt = events.StateRunning, created.Image, &started
		running.ExecPath, running.ExecPathNote = created.ExecPath, created.ExecPathNote
		running.Network = created.Network
		if running.Network == nil {
			n := derefNetwork(cmd.Request.Network)
			running.Network = &n
		}
		rev, werr = w.putRecord(ctx, running, rev0)
		sb.mu.Lock()
		if werr == nil {
			sb.record, sb.revision = running, rev
			if !sb.gone && sb.killWait == nil && cctx.Err() == nil {
				sb.ready = true
				sb.cancelCreate = nil
				w.armDeadline(sb)
			}
		}
		sb.mu.Unlock()
	}
	sb.regMu.Unlock()
	// The reply's record is read with ready: once ready, a kill may mark
	// the record gone at any moment (markGone writes it under sb.mu).
	sb.mu.Lock()
	ready, rec := sb.ready, sb.record
	sb.mu.Unlock()
	if !ready {
		// A kill arrived while the backend worked, the record changed
		// under us, or the registry refused the write: the sandbox must
		// not survive.
		log.Info("create abandoned", slog.Any("err", werr))
		if werr != nil && !revisionConflict(werr) {
			// Nobody killed it: the bus failed. Retryable, not "killed".
			w.abortCreate(sb, op, "registry unavailable during create")
			w.reply(env.ReplyTo, nil, events.Errorf(events.CodeBackendUnavailable, "the sandbox registry refused the create's record; retry"))
			_ = msg.Term()
			return
		}
		w.abortCreate(sb, op, "killed during create")
		w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxGone, "sandbox was killed while it was being created"))
		_ = msg.Term()
		return
	}
	op.close(nil)
	log.Debug("sandbox created")
	if cmd.Resume {
		w.reply(env.ReplyTo, resumeReply(rec, cmd), nil)
		_ = msg.Ack()
		w.afterResume(cmd) // after the answer: the caller need not wait for it
		return
	}
	w.reply(env.ReplyTo, w.createReply(rec, created.Warnings), nil)
	_ = msg.Ack()
}

// revisionConflict reports whether a registry write failed because the
// record changed since it was read (a kill, a router tombstone, the
// reaper), as opposed to the registry being unreachable.
func revisionConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

func (w *Worker) createReply(r events.Sandbox, warnings []string) events.CreateReply {
	if w.info.Isolation == events.TierUnknown {
		warnings = append(warnings, "backend isolation tier is unknown: no isolation guarantee")
	}
	return events.CreateReply{SandboxID: r.SandboxID, Backend: r.Backend, Class: r.Class, Isolation: r.Isolation,
		Capabilities: r.Capabilities, Deadline: r.Deadline, Warnings: warnings}
}

// createConflict handles a create whose registry claim failed: a redelivery
// of a create this worker finished, another worker's claim, a retry of a
// create of the same id and spec (retriedCreate), a client-chosen id in
// use, or a sandbox killed before it was created. It answers the command,
// unless it took the claim over: then it returns the record's revision
// and true, and the create goes on.
func (w *Worker) createConflict(msg jetstream.Msg, env cemsg.Envelope, cmd events.CreateCommand, rec events.Sandbox, claimErr error) (uint64, bool) {
	// Bounded by the create timeout: a retry may wait for the create it
	// repeats.
	ctx, cancel := context.WithTimeout(detached(), w.cfg.CreateTimeout)
	defer cancel()
	for {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		entry, err := w.registry.Get(gctx, cmd.SandboxID)
		gcancel()
		if err != nil {
			w.log.Warn("registry claim failed", "sandbox_id", cmd.SandboxID, slog.Any("err", claimErr), slog.Any("read_err", err))
			_ = msg.NakWithDelay(time.Second)
			return 0, false
		}
		var existing events.Sandbox
		_ = json.Unmarshal(entry.Value(), &existing)
		if existing.CreateOp == env.ID || !sameCreate(existing, cmd) {
			w.otherCreate(ctx, msg, env, cmd, existing, entry.Revision())
			return 0, false
		}
		switch w.retryAction(ctx, existing, env.ID) {
		case retryAnswer:
			w.reply(env.ReplyTo, w.createReply(existing, nil), nil)
			_ = msg.Ack()
			return 0, false
		case retryTakeOver:
			w.beginClaim(cmd.SandboxID) // ended by create once it tracks the sandbox
			rev, err := w.putRecord(ctx, rec, entry.Revision())
			if err == nil {
				w.log.Info("create retried: claim taken over", "sandbox_id", cmd.SandboxID, "from_op", truncate(existing.CreateOp), "state", existing.State)
				return rev, true
			}
			w.endClaim(cmd.SandboxID)
			if !revisionConflict(err) {
				w.log.Warn("registry claim failed", "sandbox_id", cmd.SandboxID, slog.Any("err", err))
				_ = msg.NakWithDelay(time.Second)
				return 0, false
			}
			// Changed meanwhile (another retry won, or the reaper): look again.
		case retryWait:
			if !w.waitRecordChange(ctx, msg, existing, entry.Revision()) {
				if w.isStopping() {
					_ = msg.Nak() // another worker takes it
					return 0, false
				}
				w.reply(env.ReplyTo, nil, events.Errorf(events.CodeCreateTimeout, "sandbox %s: the create this one repeats was not ready within %s", cmd.SandboxID, w.cfg.CreateTimeout))
				_ = msg.Term()
				return 0, false
			}
		case retryEnded:
			w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s was created and has ended (%s)", cmd.SandboxID, existing.EndReason).With("sandbox_id", cmd.SandboxID))
			_ = msg.Term()
			return 0, false
		default:
			w.reply(env.ReplyTo, nil, events.Errorf(events.CodeSandboxExists, "sandbox %s already exists", cmd.SandboxID).With("sandbox_id", cmd.SandboxID))
			_ = msg.Term()
			return 0, false
		}
	}
}

// otherCreate answers a create whose id another create (or this one, on
// redelivery) claimed, when it is not a retry of it.
func (w *Worker) otherCreate(ctx context.Context, msg jetstream.Msg, env cemsg.Envelope, cmd events.CreateCommand, existing events.Sandbox, revision uint64) {
	switch {
	case existing.CreateOp == env.ID && existing.Worker == w.cfg.WorkerID && existing.State == events.StateRunning:
		w.reply(env.ReplyTo, w.createReply(existing, nil), nil) // redelivery after we finished
		_ = msg.Ack()
	case existing.CreateOp == env.ID && existing.State == events.StateCreating && w.claimOrphaned(ctx, existing):
		// Redelivered because the worker that claimed it died mid-create
		// (or this worker id's predecessor did): nobody will answer. Say
		// so, and end the claim so that the sandbox is never half-alive.
		w.log.Info("create orphaned by its worker", "sandbox_id", cmd.SandboxID, "claimed_by", existing.Worker)
		ghost := &sandbox{id: cmd.SandboxID, record: existing, revision: revision}
		w.markGone(ctx, ghost, "lost: its worker died while creating it")
		w.reply(env.ReplyTo, nil, events.Errorf(events.CodeCreateOrphaned, "worker %s died while creating sandbox %s", existing.Worker, cmd.SandboxID))
		_ = msg.Term()
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
	if sb.resumeFrom != nil {
		w.abortResume(sb, op, reason)
		return
	}
	kctx, cancel := context.WithTimeout(detached(), w.cfg.KillTimeout)
	defer cancel()
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		w.log.Warn("cleanup after failed create", "sandbox_id", sb.id, slog.Any("err", err))
	}
	if !w.markGone(kctx, sb, reason) {
		// The registry is unreachable (the reason the create failed,
		// often): the claim would stay "creating" until the reaper's
		// StuckCreate. Keep trying in the background.
		w.goTracked(func() { w.markGoneLater(sb, reason) })
	}
	w.forget(sb.id)
	if op != nil {
		op.close(events.Errorf(events.CodeCreateFailed, "%s", reason))
	}
}

// Retries of an aborted create's ended state.
const (
	markGoneBackoffMax = 5 * time.Second
	markGoneFor        = 2 * time.Minute
)

// markGoneLater retries markGone with back-off for up to markGoneFor, or
// until the worker stops.
func (w *Worker) markGoneLater(sb *sandbox, reason string) {
	deadline := time.Now().Add(markGoneFor)
	for backoff := 250 * time.Millisecond; time.Now().Before(deadline); backoff = min(2*backoff, markGoneBackoffMax) {
		select {
		case <-w.stopping:
			return
		case <-time.After(backoff):
		}
		ctx, cancel := context.WithTimeout(detached(), 5*time.Second)
		ok := w.markGone(ctx, sb, reason)
		cancel()
		if ok {
			w.log.Info("aborted create's record ended", "sandbox_id", sb.id)
			return
		}
	}
	w.log.Warn("aborted create's record left creating: the reaper's stuck-create sweep ends it", "sandbox_id", sb.id)
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

// claimOrphaned reports whether a create claimed in the registry will never
// be finished: this worker id claimed it but does not hold it (a
// predecessor's), or the claiming worker's lease is gone. A lease that
// cannot be read counts as alive.
func (w *Worker) claimOrphaned(ctx context.Context, claim events.Sandbox) bool {
	if claim.Worker == w.cfg.WorkerID {
		return w.lookup(claim.SandboxID) == nil && !w.isClaiming(claim.SandboxID)
	}
	_, err := w.leases.Get(ctx, events.WorkerKey(w.info.Name, claim.Worker))
	return errors.Is(err, jetstream.ErrKeyNotFound)
}
