package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Snapshotter is a Backend that keeps a sandbox's writable state: the
// runtime compresses, checksums and stores what Snapshot writes in the
// object store events.BucketSnapshots, and gives it back to Restore.
type Snapshotter interface {
	// Snapshot writes the sandbox's writable state to w as a tar (owners
	// and modes kept), its processes frozen while it is read. With final
	// the sandbox stays frozen afterwards (a pause removes it next).
	Snapshot(ctx context.Context, sandboxID string, w io.Writer, final bool) (SnapshotStats, error)
	// Restore extracts a tar that Snapshot wrote into a sandbox just
	// created (before its first exec), under roots.
	Restore(ctx context.Context, sandboxID string, r io.Reader, roots []string) error
}

// SnapshotStats is what a Snapshot wrote.
type SnapshotStats struct {
	// Roots are the absolute paths whose trees the tar holds.
	Roots []string
	Files int64
}

// snapshotChunkSize is the object store chunk of a snapshot (under the
// server's default max_payload of 1 MiB).
const snapshotChunkSize = 512 << 10

// durables is the worker's state of durable operations.
type durables struct {
	mu    sync.Mutex
	store jetstream.ObjectStore
	busy  map[string]string // sandbox -> the op pausing or snapshotting it
}

// snapStore opens the snapshot bucket (made by `sandboxio bus init`).
func (w *Worker) snapStore(ctx context.Context) (jetstream.ObjectStore, *events.Error) {
	w.dur.mu.Lock()
	defer w.dur.mu.Unlock()
	if w.dur.store != nil {
		return w.dur.store, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := w.js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "snapshot store %s: %v", events.BucketSnapshots, err)
	}
	w.dur.store = st
	return st, nil
}

// beginBusy marks sb as being paused or snapshotted; SandboxBusy when
// another such operation holds it.
func (w *Worker) beginBusy(id, op string) *events.Error {
	w.dur.mu.Lock()
	defer w.dur.mu.Unlock()
	if w.dur.busy == nil {
		w.dur.busy = map[string]string{}
	}
	if other, ok := w.dur.busy[id]; ok {
		return events.Errorf(events.CodeSandboxBusy, "sandbox %s is being %s", id, busyWord(other)).With("sandbox_id", id)
	}
	w.dur.busy[id] = op
	return nil
}

func (w *Worker) endBusy(id string) {
	w.dur.mu.Lock()
	defer w.dur.mu.Unlock()
	delete(w.dur.busy, id)
}

func busyWord(op string) string {
	if op == events.OpPause {
		return "paused"
	}
	return "snapshotted"
}

// durableGate refuses, while a pause runs, every operation but kill.
func (w *Worker) durableGate(id, op string) *events.Error {
	if op == events.OpKill {
		return nil
	}
	w.dur.mu.Lock()
	defer w.dur.mu.Unlock()
	if w.dur.busy[id] == events.OpPause {
		return events.Errorf(events.CodeSandboxBusy, "sandbox %s is being paused", id).With("sandbox_id", id)
	}
	return nil
}

// durableOf is the durability a create asks for, for its record.
func durableOf(cmd events.CreateCommand) *events.DurableState {
	r := cmd.Request
	if !r.Durable() {
		return nil
	}
	d := &events.DurableState{OnDeadline: r.OnDeadline, AutoResume: r.AutoResume, TimeoutS: r.TimeoutS}
	if !cmd.Resume {
		d.ForkOf = r.FromSnapshot
	}
	return d
}

// snapshotQuota is the tenant's snapshot limits and what its complete
// snapshots use.
func (w *Worker) snapshotQuota(ctx context.Context, st jetstream.ObjectStore, tenant string) (limits events.TenantLimits, count, bytes int64, e *events.Error) {
	limits = events.DefaultTenantLimits
	if tenant != events.TenantOpen {
		if kv, err := w.js.KeyValue(ctx, events.BucketTenants); err == nil {
			if entry, err := kv.Get(ctx, tenant); err == nil {
				var rec events.TenantRecord
				if json.Unmarshal(entry.Value(), &rec) == nil {
					if rec.Limits.MaxSnapshotBytes != 0 {
						limits.MaxSnapshotBytes = rec.Limits.MaxSnapshotBytes
					}
					if rec.Limits.MaxSnapshots != 0 {
						limits.MaxSnapshots = rec.Limits.MaxSnapshots
					}
					if rec.Limits.SnapshotRetentionS != 0 {
						limits.SnapshotRetentionS = rec.Limits.SnapshotRetentionS
					}
				}
			}
		}
	}
	infos, err := st.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return limits, 0, 0, events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	for _, oi := range infos {
		if oi.Metadata[metaTenant] != tenant || oi.Metadata[metaKind] == "" {
			continue
		}
		n, _ := strconv.ParseInt(oi.Metadata[metaBytes], 10, 64)
		count++
		bytes += n
	}
	return limits, count, bytes, nil
}

// Metadata keys of a snapshot's manifest object, so that a listing needs
// no read of each manifest.
const (
	metaTenant  = "tenant"
	metaKind    = "kind"
	metaBytes   = "bytes"
	metaSandbox = "sandbox"
	metaExpires = "expires"
)

// takeSnapshot stores a snapshot of sb: the data object, then its manifest.
// A failure leaves neither (the store deletes a partial data object; a
// data object without a manifest is never resumed and the reaper removes
// it).
func (w *Worker) takeSnapshot(ctx context.Context, sb *sandbox, kind, name string) (events.SnapshotManifest, *events.Error) {
	snap, ok := w.backend.(Snapshotter)
	if !ok {
		return events.SnapshotManifest{}, events.Errorf(events.CodeCapabilityNotSupp, "backend %s takes no snapshots", w.info.Name).
			With("capability", string(events.CapSnapshot))
	}
	sb.mu.Lock()
	cmd, rec := sb.createCmd, sb.record
	sb.mu.Unlock()
	if cmd == nil {
		return events.SnapshotManifest{}, events.Errorf(events.CodeCapabilityNotSupp,
			"sandbox %s was adopted from an earlier worker process, which kept its create spec; it cannot be snapshotted", sb.id).
			With("capability", string(events.CapSnapshot))
	}
	st, e := w.snapStore(ctx)
	if e != nil {
		return events.SnapshotManifest{}, e
	}
	tenant := sb.tenantToken()
	limits, count, used, e := w.snapshotQuota(ctx, st, tenant)
	if e != nil {
		return events.SnapshotManifest{}, e
	}
	if limits.MaxSnapshots > 0 && count >= limits.MaxSnapshots {
		return events.SnapshotManifest{}, events.Errorf(events.CodeSnapshotCountQuota, "tenant keeps %d snapshots; the limit is %d", count, limits.MaxSnapshots).
			With("quota", "max_snapshots").With("limit", limits.MaxSnapshots).With("usage", count)
	}
	room := int64(-1)
	if limits.MaxSnapshotBytes > 0 {
		if room = limits.MaxSnapshotBytes - used; room <= 0 {
			return events.SnapshotManifest{}, events.Errorf(events.CodeSnapshotBytesQuota, "tenant's snapshots hold %d bytes; the limit is %d", used, limits.MaxSnapshotBytes).
				With("quota", "max_snapshot_bytes").With("limit", limits.MaxSnapshotBytes).With("usage", used)
		}
	}
	start := time.Now()
	id := events.NewSnapshotID()
	dataName := events.SnapshotDataName(id)

	pr, pw := io.Pipe()
	var stats SnapshotStats
	var snapErr error
	done := make(chan struct{})
	go func() { // waited for below
		defer close(done)
		// zstd at its fastest: incompressible data (a workspace of
		// archives, models) costs little more than its copy.
		zw, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
		if err != nil {
			snapErr = err
			_ = pw.CloseWithError(err)
			return
		}
		stats, snapErr = snap.Snapshot(ctx, sb.id, zw, kind == events.SnapshotKindPause)
		if cerr := zw.Close(); snapErr == nil {
			snapErr = cerr
		}
		_ = pw.CloseWithError(snapErr)
	}()
	var src io.Reader = pr
	var over *quotaReader
	if room > 0 {
		over = &quotaReader{r: pr, left: room}
		src = over
	}
	putCtx, stopWatch := w.cutOnReconnect(ctx)
	info, putErr := st.Put(putCtx, jetstream.ObjectMeta{Name: dataName, Description: "sandbox snapshot data",
		Metadata: map[string]string{metaTenant: tenant, metaSandbox: sb.id},
		Opts:     &jetstream.ObjectMetaOptions{ChunkSize: snapshotChunkSize}}, src)
	stopWatch()
	_ = pr.CloseWithError(errUploadEnded) // unblock the writer
	<-done
	fail := func(e *events.Error) (events.SnapshotManifest, *events.Error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		// Cut by the bus: answer once the connection is back, or the
		// answer is lost with it (bounded by dctx).
		for !w.nc.IsConnected() && dctx.Err() == nil {
			select {
			case <-dctx.Done():
			case <-time.After(reconnectPoll):
			}
		}
		_ = st.Delete(dctx, dataName)
		return events.SnapshotManifest{}, e
	}
	switch {
	case over != nil && over.exceeded:
		return fail(events.Errorf(events.CodeSnapshotBytesQuota, "the snapshot exceeds the tenant's snapshot bytes quota (%d of %d used)", used, limits.MaxSnapshotBytes).
			With("quota", "max_snapshot_bytes").With("limit", limits.MaxSnapshotBytes).With("usage", used))
	case snapErr != nil && !errors.Is(snapErr, errUploadEnded):
		return fail(classify(snapErr))
	case putErr != nil || snapErr != nil:
		return fail(events.Errorf(events.CodeBackendUnavailable, "snapshot upload: %v", putErr))
	}
	now := time.Now().UTC()
	exp := now.Add(time.Duration(limits.SnapshotRetentionS) * time.Second)
	m := events.SnapshotManifest{
		SnapshotInfo: events.SnapshotInfo{SnapshotID: id, Name: name, SandboxID: sb.id, Kind: kind, Backend: w.info.Name,
			Image: rec.Image, Bytes: int64(info.Size), Files: stats.Files, Digest: info.Digest, Content: events.SnapshotContentFS,
			CreatedAt: now, ExpiresAt: &exp, DurationMS: time.Since(start).Milliseconds()},
		Tenant: tenant, Owner: rec.Owner, DataObject: dataName, DataDigest: info.Digest, Compression: "zstd",
		Roots: stats.Roots, Command: *cmd,
	}
	m.Command.Request.Secrets = nil // never in clear; the sealed box stays
	body, err := json.Marshal(m)
	if err != nil {
		return fail(events.Errorf(events.CodeInternal, "manifest: %v", err))
	}
	if _, err := st.PutBytes(ctx, events.SnapshotManifestName(id), body); err != nil {
		return fail(events.Errorf(events.CodeBackendUnavailable, "snapshot manifest: %v", err))
	}
	// The manifest's metadata lets listings and quotas skip reading it.
	if err := st.UpdateMeta(ctx, events.SnapshotManifestName(id), jetstream.ObjectMeta{Name: events.SnapshotManifestName(id),
		Description: "sandbox snapshot manifest", Metadata: map[string]string{metaTenant: tenant, metaKind: kind,
			metaBytes: strconv.FormatInt(m.Bytes, 10), metaSandbox: sb.id, metaExpires: exp.Format(time.RFC3339)}}); err != nil {
		w.log.Warn("snapshot manifest metadata", "sandbox_id", sb.id, slog.Any("err", err))
	}
	return m, nil
}

// errUploadEnded is what the backend's writes get once the upload stopped.
var errUploadEnded = errors.New("snapshot upload ended")

// quotaReader fails a read that would pass left bytes.
type quotaReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (q *quotaReader) Read(p []byte) (int, error) {
	n, err := q.r.Read(p)
	q.left -= int64(n)
	if q.left < 0 {
		q.exceeded = true
		return 0, errors.New("snapshot quota exceeded")
	}
	return n, err
}

// deleteSnapshot removes a snapshot's manifest first (so that it is
// incomplete at once), then its data.
func deleteSnapshot(ctx context.Context, st jetstream.ObjectStore, id string) error {
	err := st.Delete(ctx, events.SnapshotManifestName(id))
	if derr := st.Delete(ctx, events.SnapshotDataName(id)); err == nil || errors.Is(err, jetstream.ErrObjectNotFound) {
		if derr != nil && !errors.Is(derr, jetstream.ErrObjectNotFound) {
			return derr
		}
		return nil
	}
	return err
}

// handleSnapshot serves snapshot: the sandbox keeps running.
func (w *Worker) handleSnapshot(sb *sandbox, env cemsg.Envelope, r *events.SnapshotRequest) (any, *events.Error) {
	if e := w.beginBusy(sb.id, events.OpSnapshot); e != nil {
		return nil, e
	}
	defer w.endBusy(sb.id)
	return w.recorded(sb, env, events.OpSnapshot, map[string]string{"name": truncate(r.Name)}, func(*opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.CreateTimeout+time.Minute)
		defer cancel()
		m, e := w.takeSnapshot(ctx, sb, events.SnapshotKindSnapshot, r.Name)
		if e != nil {
			return nil, e
		}
		return m.SnapshotInfo, nil
	})
}

// handlePause snapshots sb and removes it, leaving its record paused.
func (w *Worker) handlePause(sb *sandbox, env cemsg.Envelope) (any, *events.Error) {
	return w.pause(sb, env.ID, env.Traceparent, "paused")
}

// pause is handlePause's work, also done at the deadline of a sandbox
// created with on_deadline pause.
func (w *Worker) pause(sb *sandbox, opID, traceparent, reason string) (any, *events.Error) {
	if e := w.beginBusy(sb.id, events.OpPause); e != nil {
		return nil, e
	}
	defer w.endBusy(sb.id)
	if opID == "" {
		opID = events.NewID()
	}
	sb.mu.Lock()
	owner := sb.record.Owner
	sb.mu.Unlock()
	op, aerr := w.openOp(context.Background(), events.OpPause, opID, sb.id, owner, traceparent, sb.redaction(),
		map[string]string{"reason": reason})
	if aerr != nil {
		return nil, aerr
	}
	v, e := w.pauseLocked(sb)
	op.close(e)
	return v, e
}

func (w *Worker) pauseLocked(sb *sandbox) (any, *events.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.CreateTimeout+time.Minute)
	defer cancel()
	sb.mu.Lock()
	if sb.gone || sb.killWait != nil || !sb.ready {
		sb.mu.Unlock()
		return nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being created or killed", sb.id).With("sandbox_id", sb.id)
	}
	if sb.timer != nil {
		sb.timer.Stop() // no deadline kill while the pause runs
	}
	prev := sb.record.Durable
	sb.mu.Unlock()
	m, e := w.takeSnapshot(ctx, sb, events.SnapshotKindPause, "")
	if e != nil {
		// Still running as it was: a failure after the backend's read
		// (the store's last put, the manifest) leaves it frozen, so thaw
		// it whatever failed (a thaw of a running sandbox does nothing).
		if th, ok := w.backend.(Thawer); ok {
			tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Second) // a bounded teardown of its own: ctx may be what ran out
			_ = th.Thaw(tctx, sb.id)
			tcancel()
		}
		sb.mu.Lock()
		if !sb.gone && sb.killWait == nil {
			w.armDeadline(sb)
		}
		sb.mu.Unlock()
		return nil, e
	}
	// The processes end with the container; the record says paused.
	sb.mu.Lock()
	procs := slices.Collect(maps.Values(sb.procs))
	sb.mu.Unlock()
	for _, p := range procs {
		p.cancel(errSandboxKilled)
	}
	st, _ := w.snapStore(ctx)
	sb.regMu.Lock()
	now := time.Now().UTC()
	sb.mu.Lock()
	rec, rev := sb.record, sb.revision
	sb.mu.Unlock()
	d := events.DurableState{Store: events.BucketSnapshots}
	if prev != nil {
		d = *prev
		d.Store = events.BucketSnapshots
	}
	d.SnapshotID, d.PausedAt, d.ExpiresAt = m.SnapshotID, &now, m.ExpiresAt
	if d.TimeoutS == 0 {
		d.TimeoutS = sb.createCmd.Request.TimeoutS
	}
	// Paused, still held by this worker until its container is gone: no
	// resume claims it before (a new container of the same name would
	// meet the old one); then the worker lets go (Worker "").
	rec.State, rec.Durable = events.StatePaused, &d
	rec.ExecPath, rec.ExecPathNote = "", ""
	if m.ExpiresAt != nil {
		rec.Deadline = *m.ExpiresAt // the reaper removes it then
	}
	next, err := w.putRecord(ctx, rec, rev)
	sb.regMu.Unlock()
	if err != nil {
		// Not paused: the snapshot goes, the sandbox (frozen) is thawed by
		// a kill-free path: it stays as it was, its record running.
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = deleteSnapshot(dctx, st, m.SnapshotID)
		if th, ok := w.backend.(Thawer); ok {
			_ = th.Thaw(dctx, sb.id)
		}
		sb.mu.Lock()
		killed := sb.gone || sb.killWait != nil
		if !killed {
			w.armDeadline(sb)
		}
		sb.mu.Unlock()
		if killed || revisionConflict(err) {
			return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s was killed while it was being paused", sb.id).With("sandbox_id", sb.id)
		}
		return nil, events.Errorf(events.CodeBackendUnavailable, "registry update failed, the sandbox was not paused: %v", err)
	}
	sb.mu.Lock()
	sb.record, sb.revision, sb.gone = rec, next, true
	sb.mu.Unlock()
	kctx, kcancel := context.WithTimeout(context.Background(), w.cfg.KillTimeout)
	defer kcancel()
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		w.log.Warn("paused sandbox's container not removed: the janitor removes it", "sandbox_id", sb.id, slog.Any("err", err))
	}
	w.forgetIf(sb)
	if err := w.letGo(kctx, sb.id, next); err != nil {
		w.log.Warn("paused sandbox still names its worker: a resume waits for the worker's lease to end", "sandbox_id", sb.id, slog.Any("err", err))
	}
	if prev != nil && prev.SnapshotID != "" && prev.SnapshotID != m.SnapshotID && st != nil {
		_ = deleteSnapshot(kctx, st, prev.SnapshotID) // the state it resumed from
	}
	return events.PauseReply{SandboxID: sb.id, State: events.StatePaused, SnapshotID: m.SnapshotID, Bytes: m.Bytes,
		Content: events.SnapshotContentFS, ExpiresAt: m.ExpiresAt}, nil
}

// Thawer is a Snapshotter that can thaw a sandbox a final Snapshot left
// frozen, when the pause does not go ahead.
type Thawer interface {
	Thaw(ctx context.Context, sandboxID string) error
}

// deadlineReached ends a sandbox at its deadline: paused when it was
// created with on_deadline pause (killed when the pause fails), else killed.
func (w *Worker) deadlineReached(sb *sandbox) {
	sb.mu.Lock()
	d := sb.record.Durable
	sb.mu.Unlock()
	if d != nil && d.OnDeadline == events.OnDeadlinePause {
		if _, e := w.pause(sb, "", "", "deadline"); e == nil {
			return
		} else if e.Code == events.CodeSandboxBusy {
			return // a pause or kill is under way
		} else {
			w.log.Warn("pause at the deadline failed: killing", "sandbox_id", sb.id, "code", e.Code)
		}
	}
	w.kill(sb, "deadline", "", "")
}

// restoreSnapshot fills a sandbox just created from the snapshot its
// create names, checking that the snapshot is the tenant's and complete.
func (w *Worker) restoreSnapshot(ctx context.Context, sb *sandbox, cmd events.CreateCommand, image string) *events.Error {
	snap, ok := w.backend.(Snapshotter)
	if !ok {
		return events.Errorf(events.CodeCapabilityNotSupp, "backend %s cannot restore snapshots", w.info.Name).With("capability", string(events.CapSnapshot))
	}
	st, e := w.snapStore(ctx)
	if e != nil {
		return e
	}
	id := cmd.Request.FromSnapshot
	m, e := bus.ReadSnapshotManifest(ctx, st, id)
	if e != nil {
		return e
	}
	if m.Tenant != tenantToken(cmd.Tenant) {
		return events.Errorf(events.CodeSnapshotNotFound, "no complete snapshot %s", id).With("snapshot_id", id)
	}
	if m.Image != "" && image != "" && m.Image != image {
		return events.Errorf(events.CodeInvalidValue, "snapshot %s is of image %s, the sandbox runs %s", id, m.Image, image).With("field", "from_snapshot")
	}
	obj, err := st.Get(ctx, m.DataObject)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s has lost its data", id).With("snapshot_id", id)
		}
		return events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	defer obj.Close()
	// The object store checks the data's digest (SHA-256) once it has
	// been read to its end, and zstd each frame's checksum: the restore
	// counts only when both held.
	zr, err := zstd.NewReader(obj, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s: %v", id, err).With("snapshot_id", id)
	}
	rerr := snap.Restore(ctx, sb.id, zr, m.Roots)
	if rerr == nil {
		_, rerr = io.Copy(io.Discard, zr) // the tar's padding, to the last frame's checksum
	}
	zr.Close() // its reads of obj end here
	if rerr == nil {
		_, rerr = io.Copy(io.Discard, obj) // the rest of the object, to its digest
	}
	switch {
	case rerr != nil && (errors.Is(rerr, jetstream.ErrDigestMismatch) || errors.Is(rerr, zstd.ErrCRCMismatch) || errors.Is(rerr, zstd.ErrMagicMismatch) ||
		errors.Is(rerr, io.ErrUnexpectedEOF)):
		return events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s: %v", id, rerr).With("snapshot_id", id)
	case rerr != nil:
		var ee *events.Error
		if errors.As(rerr, &ee) {
			return ee
		}
		return events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s could not be restored: %v", id, rerr).With("snapshot_id", id)
	}
	return nil
}

// claimResume takes the paused record of a resume's sandbox: the create
// goes on with its revision, or the command is answered.
func (w *Worker) claimResume(ctx context.Context, cmd events.CreateCommand, rec *events.Sandbox) (uint64, *events.Sandbox, *events.Error) {
	entry, err := w.registry.Get(ctx, cmd.SandboxID)
	if err != nil {
		return 0, nil, events.Errorf(events.CodeSandboxNotFound, "no sandbox %s", cmd.SandboxID)
	}
	var cur events.Sandbox
	if err := json.Unmarshal(entry.Value(), &cur); err != nil {
		return 0, nil, events.Errorf(events.CodeInternal, "registry record of %s unreadable", cmd.SandboxID)
	}
	switch {
	case cur.State == events.StateRunning || cur.State == events.StateCreating:
		return 0, nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is %s already", cmd.SandboxID, cur.State).With("sandbox_id", cmd.SandboxID)
	case cur.State != events.StatePaused:
		return 0, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is %s", cmd.SandboxID, cur.State).With("sandbox_id", cmd.SandboxID)
	case cur.Durable == nil || cur.Durable.SnapshotID != cmd.Request.FromSnapshot || tenantToken(cur.Tenant) != tenantToken(cmd.Tenant):
		return 0, nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s changed since the resume was sent", cmd.SandboxID).With("sandbox_id", cmd.SandboxID)
	case w.heldElsewhere(ctx, cur):
		return 0, nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is still being paused", cmd.SandboxID).With("sandbox_id", cmd.SandboxID)
	}
	rec.CreatedAt, rec.Metadata, rec.Ports = cur.CreatedAt, cur.Metadata, cur.Ports
	d := *cur.Durable
	d.SnapshotID, d.PausedAt, d.ExpiresAt = "", nil, nil // its state is the sandbox's again
	rec.Durable = &d
	rev, err := w.putRecord(ctx, *rec, entry.Revision())
	if err != nil {
		if revisionConflict(err) {
			return 0, nil, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being resumed by another request", cmd.SandboxID).With("sandbox_id", cmd.SandboxID)
		}
		return 0, nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
	}
	return rev, &cur, nil
}

// abortResume puts a resume that failed back: the container goes, the
// record is paused again with the snapshot it had.
func (w *Worker) abortResume(sb *sandbox, op *opRecord, reason string) {
	kctx, cancel := context.WithTimeout(context.Background(), w.cfg.KillTimeout)
	defer cancel()
	if err := w.backend.Kill(kctx, sb.id); err != nil {
		w.log.Warn("cleanup after failed resume", "sandbox_id", sb.id, slog.Any("err", err))
	}
	sb.regMu.Lock()
	sb.mu.Lock()
	paused, rev := *sb.resumeFrom, sb.revision
	sb.gone = true
	sb.mu.Unlock()
	if _, err := w.putRecord(kctx, paused, rev); err != nil {
		w.log.Warn("failed resume: record not set back to paused", "sandbox_id", sb.id, slog.Any("err", err))
	}
	sb.regMu.Unlock()
	w.forget(sb.id)
	if op != nil {
		op.close(events.Errorf(events.CodeCreateFailed, "resume failed: %s", reason))
	}
}

// afterResume removes the snapshot a resumed sandbox came from: its state
// lives in the sandbox again.
func (w *Worker) afterResume(cmd events.CreateCommand) {
	if !cmd.Resume || cmd.Request.FromSnapshot == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, e := w.snapStore(ctx)
	if e != nil {
		return
	}
	if err := deleteSnapshot(ctx, st, cmd.Request.FromSnapshot); err != nil {
		w.log.Warn("resumed sandbox's snapshot not deleted: the reaper removes it", "sandbox_id", cmd.SandboxID, slog.Any("err", err))
	}
}

func resumeReply(r events.Sandbox, cmd events.CreateCommand) events.ResumeReply {
	return events.ResumeReply{SandboxID: r.SandboxID, Backend: r.Backend, Worker: r.Worker, State: r.State, Isolation: r.Isolation,
		Capabilities: r.Capabilities, Deadline: r.Deadline, SnapshotID: cmd.Request.FromSnapshot, Content: events.SnapshotContentFS}
}

// durableSummary adds to a create's record what makes it a resume or a
// fork: the snapshot it starts from.
func durableSummary(cmd events.CreateCommand, summary map[string]string) map[string]string {
	switch {
	case cmd.Resume:
		summary["resume"], summary["from_snapshot"] = "true", cmd.Request.FromSnapshot
	case cmd.Request.FromSnapshot != "":
		summary["fork"], summary["from_snapshot"] = "true", cmd.Request.FromSnapshot
	}
	return summary
}

// killedPaused deletes the snapshot of a paused sandbox that a kill ended.
func (w *Worker) killedPaused(ctx context.Context, rec events.Sandbox) {
	if rec.State != events.StatePaused || rec.Durable == nil || rec.Durable.SnapshotID == "" {
		return
	}
	st, e := w.snapStore(ctx)
	if e != nil {
		return // the reaper removes it when its retention ends
	}
	if err := deleteSnapshot(ctx, st, rec.Durable.SnapshotID); err != nil {
		w.log.Warn("killed paused sandbox's snapshot not deleted: the reaper removes it", "sandbox_id", rec.SandboxID, slog.Any("err", err))
	}
}

// reconnectPoll is how often an upload looks at its connection.
const reconnectPoll = 100 * time.Millisecond

// cutOnReconnect returns a context that ends when the worker's connection
// drops or reconnects: the acknowledgements of chunks published before
// are lost with it, and the upload would otherwise wait for them until
// its bound. stop ends the watch and waits for it.
func (w *Worker) cutOnReconnect(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	start := w.nc.Stats().Reconnects
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(reconnectPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !w.nc.IsConnected() || w.nc.Stats().Reconnects != start {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// forgetIf forgets sb unless another sandbox of its id (a resume of it)
// is tracked by now.
func (w *Worker) forgetIf(sb *sandbox) {
	w.mu.Lock()
	same := w.sandboxes[sb.id] == sb
	w.mu.Unlock()
	if same {
		w.forget(sb.id)
	}
}

// letGo clears the worker of a paused record whose container is gone, so
// that any worker's resume may claim it.
func (w *Worker) letGo(ctx context.Context, id string, revision uint64) error {
	for attempt := 0; attempt < 3; attempt++ {
		entry, err := w.registry.Get(ctx, id)
		if err != nil {
			return err
		}
		var rec events.Sandbox
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			return err
		}
		if rec.State != events.StatePaused || rec.Worker != w.cfg.WorkerID {
			return nil // killed, or no longer ours
		}
		rec.Worker = ""
		if _, err = w.putRecord(ctx, rec, entry.Revision()); err == nil || !revisionConflict(err) {
			return err
		}
	}
	return errors.New("the record kept changing")
}

// heldElsewhere reports whether a paused record still names a worker that
// is removing its container: this one, or another with a live lease.
func (w *Worker) heldElsewhere(ctx context.Context, rec events.Sandbox) bool {
	if rec.Worker == "" {
		return false
	}
	if rec.Worker == w.cfg.WorkerID {
		return true
	}
	_, err := w.leases.Get(ctx, events.WorkerKey(w.info.Name, rec.Worker))
	return !errors.Is(err, jetstream.ErrKeyNotFound)
}
