package router

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Durable sandboxes (pkg/events/durable.go): pause and snapshot go to the
// sandbox's worker; resume, forks (create from_snapshot), snapshots.list
// and snapshots.delete are served here from the registry and the snapshot
// store, which no tenant credential can read.

// durableTimeout bounds a pause, snapshot or resume end to end.
func (s *Service) durableTimeout() time.Duration { return s.cfg.CreateTimeout + time.Minute }

var snapStoreMu sync.Mutex

// snapStore opens sbx_snapshots (made by bus init).
func (s *Service) snapStore(ctx context.Context) (jetstream.ObjectStore, *events.Error) {
	snapStoreMu.Lock()
	defer snapStoreMu.Unlock()
	st, err := s.js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "snapshot store %s: %v", events.BucketSnapshots, err)
	}
	return st, nil
}

// manifest reads a complete snapshot the caller may use: another tenant's
// is as unknown as a missing one.
func (s *Service) manifest(ctx context.Context, c caller, id string) (events.SnapshotManifest, *events.Error) {
	var m events.SnapshotManifest
	st, e := s.snapStore(ctx)
	if e != nil {
		return m, e
	}
	m, e = bus.ReadSnapshotManifest(ctx, st, id)
	if e != nil {
		return m, e
	}
	if c.authed && m.Tenant != c.tenant {
		return events.SnapshotManifest{}, events.Errorf(events.CodeSnapshotNotFound, "no complete snapshot %s", id).With("snapshot_id", id)
	}
	return m, nil
}

// durableRequest serves the durable ops the router answers itself; it
// reports whether r was one.
func (s *Service) durableRequest(to string, c caller, r events.Request, traceparent string) bool {
	switch r := r.(type) {
	case *events.ResumeRequest:
		s.goDurable(func(ctx context.Context) {
			v, e := s.resume(ctx, c, r.SandboxID, r.TimeoutS, traceparent)
			s.answerDurable(to, v, e)
		})
	case *events.SnapshotsListRequest:
		s.goDurable(func(ctx context.Context) {
			v, e := s.snapshotsList(ctx, c, r)
			s.answerDurable(to, v, e)
		})
	case *events.SnapshotsDeleteRequest:
		s.goDurable(func(ctx context.Context) {
			v, e := s.snapshotsDelete(ctx, c, r)
			s.answerDurable(to, v, e)
		})
	case *events.CreateRequest:
		if r.FromSnapshot == "" {
			return false
		}
		s.goDurable(func(ctx context.Context) { s.fork(ctx, to, c, r, traceparent) })
	default:
		return false
	}
	return true
}

func (s *Service) goDurable(f func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(s.durableTimeout())
		defer cancel()
		f(ctx)
	}()
}

func (s *Service) answerDurable(to string, v any, e *events.Error) {
	if e != nil {
		s.publishReply(to, nil, e)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.publishReply(to, nil, events.Errorf(events.CodeInternal, "encode reply: %v", err))
		return
	}
	s.publishReply(to, b, nil)
}

// durableForward handles, in forwardTo, a sandbox op on a paused sandbox
// and the pause and snapshot ops (bounded like a create); it reports
// whether it took the op.
func (s *Service) durableForward(to string, c caller, op string, sb events.Sandbox, r events.Request, data []byte, traceparent string) bool {
	if sb.State != events.StatePaused {
		if op != events.OpPause && op != events.OpSnapshot || sb.State.Ended() {
			return false
		}
		key := events.WorkerKey(sb.Backend, sb.Worker)
		if !s.liveLease(key) {
			return false // forwardTo's own path answers a lost worker
		}
		if sb.State == events.StateCreating {
			// The cache may lag the create's answer: the bucket decides.
			ctx, cancel := s.workCtx(2 * time.Second)
			fresh, ok, err := s.readSandbox(ctx, sb.SandboxID)
			cancel()
			if err != nil || !ok || fresh.State == events.StateCreating {
				s.publishReply(to, nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being created", sb.SandboxID).With("sandbox_id", sb.SandboxID))
				return true
			}
			if fresh.State != events.StateRunning {
				return false // forwardTo's own path answers what it is now
			}
		}
		s.publishCommand(to, op, events.NodeSubject(sb.Backend, sb.Worker, events.Verb(op)), key, sb.SandboxID, events.NewID(), traceparent,
			json.RawMessage(data), s.durableTimeout(), &pending{tenant: c.quotaTenant()})
		return true
	}
	d := sb.Durable
	if d == nil {
		d = &events.DurableState{}
	}
	switch op {
	case events.OpPause:
		s.answerDurable(to, events.PauseReply{SandboxID: sb.SandboxID, State: events.StatePaused, SnapshotID: d.SnapshotID,
			Content: events.SnapshotContentFS, AlreadyPaused: true, ExpiresAt: d.ExpiresAt}, nil)
		return true
	case events.OpKill:
		// Any live worker of its backend ends it, recorded like every kill
		// (the router writes no records); with none, the router does.
		if key, worker := s.anyLiveWorker(sb.Backend); key != "" {
			s.publishCommand(to, op, events.NodeSubject(sb.Backend, worker, events.Verb(op)), key, sb.SandboxID, events.NewID(), traceparent,
				json.RawMessage(data), s.cfg.RequestTimeout, &pending{tenant: c.quotaTenant()})
			return true
		}
		s.goDurable(func(ctx context.Context) {
			v, e := s.killPaused(ctx, sb.SandboxID, "killed")
			s.answerDurable(to, v, e)
		})
		return true
	}
	if !d.AutoResume {
		s.publishReply(to, nil, events.Errorf(events.CodeSandboxPaused, "sandbox %s is paused: resume it first", sb.SandboxID).With("sandbox_id", sb.SandboxID))
		return true
	}
	// auto_resume: resume, then send the op to the worker that took it.
	s.goDurable(func(ctx context.Context) {
		for {
			_, e := s.resume(ctx, c, sb.SandboxID, 0, traceparent)
			if e == nil || e.Code != events.CodeSandboxBusy {
				if e != nil {
					s.publishReply(to, nil, e)
					return
				}
				break
			}
			// Still being paused, or resumed by another request: look again.
			if cur, ok, err := s.readSandbox(ctx, sb.SandboxID); err == nil && ok && cur.State == events.StateRunning {
				break
			}
			select {
			case <-ctx.Done():
				s.publishReply(to, nil, e)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		for ctx.Err() == nil {
			cur, ok, err := s.readSandbox(ctx, sb.SandboxID)
			if err == nil && ok && cur.State == events.StateRunning {
				s.forwardTo(to, c, op, cur, r, data, traceparent)
				return
			}
			if err == nil && ok && cur.State.Ended() {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // another request's resume
			}
		}
		s.publishReply(to, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s did not resume", sb.SandboxID).With("sandbox_id", sb.SandboxID))
	})
	return true
}

// resume re-creates a paused sandbox from its record and its snapshot on
// any worker of its backend, and waits for the worker's answer.
func (s *Service) resume(ctx context.Context, c caller, id string, timeoutS int, traceparent string) (any, *events.Error) {
	sb, e := s.authorize(ctx, c, id) // a tenant's unknown and foreign sandboxes alike: SBX_E1402
	if e != nil {
		return nil, e
	}
	if cur, ok, err := s.readSandbox(ctx, id); err == nil && ok {
		sb = cur // the cache may trail a pause
	}
	switch {
	case sb.State == events.StateRunning:
		return events.ResumeReply{SandboxID: id, Backend: sb.Backend, Worker: sb.Worker, State: sb.State, Isolation: sb.Isolation,
			Capabilities: sb.Capabilities, Deadline: sb.Deadline, Content: events.SnapshotContentFS, AlreadyRunning: true}, nil
	case sb.State == events.StateCreating:
		return nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being created or resumed", id).With("sandbox_id", id)
	case sb.State != events.StatePaused:
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is %s: %s", id, sb.State, sb.EndReason).With("sandbox_id", id)
	case sb.Durable == nil || sb.Durable.SnapshotID == "":
		return nil, events.Errorf(events.CodeSnapshotNotFound, "paused sandbox %s has no snapshot", id).With("sandbox_id", id)
	}
	m, e := s.manifest(ctx, caller{tenant: tenantOf(sb), authed: true}, sb.Durable.SnapshotID)
	if e != nil {
		return nil, e
	}
	cmd := m.Command
	cmd.SandboxID, cmd.Resume, cmd.Tenant = id, true, tenantOf(sb)
	cmd.Request.FromSnapshot, cmd.Request.IdempotencyKey, cmd.Request.SandboxID, cmd.Request.Secrets = sb.Durable.SnapshotID, "", "", nil
	if timeoutS == 0 {
		timeoutS = max(sb.Durable.TimeoutS, cmd.Request.TimeoutS)
	}
	cmd.Request.TimeoutS = timeoutS
	cmd.Deadline = time.Now().UTC().Add(time.Duration(timeoutS) * time.Second).Truncate(time.Millisecond)
	if e := s.place(cmd.Spec, &cmd.Request); e != nil {
		return nil, e
	}
	// A paused sandbox holds none of its tenant's sandbox and lifetime
	// quotas: its resume is admitted like a create.
	if e := s.reserveCreate(c, id, timeoutS); e != nil {
		return nil, e
	}
	v, e := s.sendAndWait(ctx, events.OpCreate, events.CreateSubject(cmd.Spec.Backend), "", id, traceparent, cmd)
	if e != nil {
		s.dropCreate(id)
	} else {
		s.createDone(id)
	}
	return v, e
}

// sendAndWait publishes a command and waits for its worker's answer.
func (s *Service) sendAndWait(ctx context.Context, op, subject, key, id, traceparent string, payload any) (any, *events.Error) {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "subscribe: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	s.publishCommand(inbox, op, subject, key, id, events.NewID(), traceparent, payload, s.durableTimeout(), &pending{})
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, events.Errorf(events.CodeWorkerTimeout, "no answer to %s of %s in time", op, id).With("sandbox_id", id)
	}
	return replyOf(msg)
}

// replyOf turns a relayed reply back into a value or an error.
func replyOf(msg *nats.Msg) (any, *events.Error) {
	if e := events.DecodeError(msg.Data); e != nil {
		return nil, e
	}
	return json.RawMessage(msg.Data), nil
}

// killPaused ends a paused sandbox: its snapshot goes, its record says gone.
func (s *Service) killPaused(ctx context.Context, id, reason string) (any, *events.Error) {
	for attempt := 0; attempt < 5; attempt++ {
		entry, err := s.registry.Get(ctx, id)
		if err != nil {
			return nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
		}
		var sb events.Sandbox
		if json.Unmarshal(entry.Value(), &sb) != nil {
			return nil, events.Errorf(events.CodeInternal, "registry record of %s unreadable", id)
		}
		if sb.State != events.StatePaused {
			if sb.State.Ended() {
				return events.KillReply{SandboxID: id, State: sb.State, AlreadyGone: true}, nil
			}
			return nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being resumed", id).With("sandbox_id", id)
		}
		now := time.Now().UTC()
		sb.State, sb.EndedAt, sb.EndReason = events.StateGone, &now, reason
		b, _ := json.Marshal(sb)
		if _, err := s.registry.Update(ctx, id, b, entry.Revision()); err != nil {
			continue // changed meanwhile: look again
		}
		if sb.Durable != nil && sb.Durable.SnapshotID != "" {
			if st, e := s.snapStore(ctx); e == nil {
				_ = st.Delete(ctx, events.SnapshotManifestName(sb.Durable.SnapshotID))
				_ = st.Delete(ctx, events.SnapshotDataName(sb.Durable.SnapshotID))
			}
		}
		return events.KillReply{SandboxID: id, State: events.StateGone}, nil
	}
	return nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s kept changing", id).With("sandbox_id", id)
}

// fork serves create with from_snapshot: the new sandbox runs the
// snapshot's image (and its class's spec unless the request names a class
// or dsn of the same image) and starts with the snapshot's files.
func (s *Service) fork(ctx context.Context, to string, c caller, r *events.CreateRequest, traceparent string) {
	m, e := s.manifest(ctx, c, r.FromSnapshot)
	if e != nil {
		s.publishReply(to, nil, e)
		return
	}
	spec := m.Command.Spec
	if r.Class != "" || r.DSN != "" {
		asked, e := s.cfg.Routing.resolve(r)
		if e != nil {
			s.publishReply(to, nil, e)
			return
		}
		if asked.Backend != spec.Backend || asked.Image != "" && spec.Image != "" && asked.Image != spec.Image {
			s.publishReply(to, nil, events.Errorf(events.CodeInvalidValue, "snapshot %s is of %s %s; the create asks for %s %s",
				r.FromSnapshot, spec.Backend, spec.Image, asked.Backend, asked.Image).With("field", "from_snapshot"))
			return
		}
		spec = asked
	}
	if e := s.checkResources(r); e != nil {
		s.publishReply(to, nil, e)
		return
	}
	if c.authed {
		r.Owner = c.tenant
	}
	var reqHash string
	if r.IdempotencyKey != "" {
		reqHash = requestHash(r)
	}
	sh := specHash(c.tenant, spec, r)
	if e := s.place(spec, r); e != nil {
		s.refreshLeases(ctx)
		if e = s.place(spec, r); e != nil {
			s.publishReply(to, nil, e)
			return
		}
	}
	if e := s.sealSecrets(spec.Backend, r); e != nil {
		s.publishReply(to, nil, e)
		return
	}
	s.dispatchCreate(to, c, r, spec, traceparent, reqHash, sh)
}

// snapshotsList lists the caller's complete snapshots, newest first.
func (s *Service) snapshotsList(ctx context.Context, c caller, r *events.SnapshotsListRequest) (any, *events.Error) {
	st, e := s.snapStore(ctx)
	if e != nil {
		return nil, e
	}
	infos, err := st.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	out := []events.SnapshotInfo{}
	for _, oi := range infos {
		md := oi.Metadata
		if md["kind"] == "" || c.authed && md["tenant"] != c.tenant || r.SandboxID != "" && md["sandbox"] != r.SandboxID {
			continue
		}
		b, err := st.GetBytes(ctx, oi.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		var m events.SnapshotManifest
		if json.Unmarshal(b, &m) == nil {
			out = append(out, m.SnapshotInfo)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	if r.Limit > 0 && len(out) > r.Limit {
		out = out[:r.Limit]
	}
	return events.SnapshotsListReply{Snapshots: out}, nil
}

// snapshotsDelete deletes a snapshot of the caller's; a paused sandbox's
// own goes with the sandbox (kill).
func (s *Service) snapshotsDelete(ctx context.Context, c caller, r *events.SnapshotsDeleteRequest) (any, *events.Error) {
	m, e := s.manifest(ctx, c, r.SnapshotID)
	if e != nil {
		return nil, e
	}
	if m.Kind == events.SnapshotKindPause {
		if sb, ok, err := s.readSandbox(ctx, m.SandboxID); err == nil && ok && sb.State == events.StatePaused &&
			sb.Durable != nil && sb.Durable.SnapshotID == r.SnapshotID {
			return nil, events.Errorf(events.CodeSandboxPaused, "snapshot %s holds paused sandbox %s: kill the sandbox to delete it", r.SnapshotID, m.SandboxID).
				With("sandbox_id", m.SandboxID)
		}
	}
	st, e := s.snapStore(ctx)
	if e != nil {
		return nil, e
	}
	if err := st.Delete(ctx, events.SnapshotManifestName(r.SnapshotID)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	if err := st.Delete(ctx, events.SnapshotDataName(r.SnapshotID)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	return events.SnapshotsDeleteReply{SnapshotID: r.SnapshotID, Deleted: true}, nil
}

// holdsQuota reports whether a sandbox in state st counts against its
// tenant's max_sandboxes and max_lifetime_s: a paused one holds no worker
// (its snapshot counts against the snapshot quotas instead).
func holdsQuota(st events.State) bool { return !st.Ended() && st != events.StatePaused }

// anyLiveWorker is a live worker of backend: its lease key and id.
func (s *Service) anyLiveWorker(backend string) (key, worker string) {
	s.mu.RLock()
	var keys []string
	for k, l := range s.leases {
		if l.Backend == backend {
			keys = append(keys, k)
		}
	}
	s.mu.RUnlock()
	sort.Strings(keys)
	for _, k := range keys {
		if s.liveLease(k) {
			s.mu.RLock()
			l := s.leases[k]
			s.mu.RUnlock()
			return k, l.Worker
		}
	}
	return "", ""
}
