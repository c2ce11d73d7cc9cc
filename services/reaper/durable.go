package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Durable sandboxes (pkg/events/durable.go): a paused sandbox has no worker
// and is never lost; its record's deadline is the end of its retention,
// when the reaper removes it with its snapshot. The reaper also removes
// snapshots that outlive their retention, and what a worker that died
// mid-snapshot left: a data object without its manifest, or chunks of an
// upload that never finished.

// Kinds and findings of the durable sweep.
const (
	KindExpirePaused      = "expire_paused"     // a paused sandbox whose retention ended
	FindingPausedExpired  = "paused_expired"    // the same, as a sweep finding
	FindingSnapshotExpiry = "snapshot_expired"  // a snapshot past its retention
	FindingSnapshotOrphan = "snapshot_orphaned" // data without a manifest, or stray chunks
	EndReasonPausedExpiry = "expired while paused"
)

// snapshotOrphanAge is how old a manifest-less data object or a stray
// chunk must be before it is removed: older than any upload in progress.
var snapshotOrphanAge = 30 * time.Minute

// expirePaused ends a paused sandbox whose retention is over: its record
// says gone, then its snapshot is deleted. It returns what it did.
func (s *Service) expirePaused(ctx context.Context, id string) (string, error) {
	reg, err := s.registry(ctx)
	if err != nil {
		return "", err
	}
	for attempt := 0; attempt < 5; attempt++ {
		e, err := reg.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return reapEnded, nil
		}
		if err != nil {
			return "", fmt.Errorf("reaper: get %s: %w", id, err)
		}
		var cur events.Sandbox
		if err := json.Unmarshal(e.Value(), &cur); err != nil {
			return "", fmt.Errorf("reaper: decode %s: %w", id, err)
		}
		if cur.State != events.StatePaused {
			return reapNotDue, nil // resumed or killed meanwhile
		}
		if cur.Deadline.IsZero() || time.Now().Before(cur.Deadline) {
			return reapNotDue, nil
		}
		if cur.SandboxID == "" {
			cur.SandboxID = id
		}
		rec := s.openRecord(ctx, KindExpirePaused, cur, map[string]string{"reason": "retention", "expired_at": cur.Deadline.UTC().Format(time.RFC3339Nano)})
		now := time.Now().UTC()
		cur.State, cur.EndedAt, cur.EndReason = events.StateGone, &now, EndReasonPausedExpiry
		b, _ := json.Marshal(cur)
		if _, err := reg.Update(ctx, id, b, e.Revision()); err != nil {
			s.closeRecord(ctx, rec, err)
			continue // changed meanwhile: look again
		}
		var derr error
		if cur.Durable != nil && cur.Durable.SnapshotID != "" {
			derr = s.deleteSnapshot(ctx, cur.Durable.SnapshotID)
		}
		s.closeRecord(ctx, rec, derr)
		s.log.Info("paused sandbox expired", "sandbox_id", id)
		return "expired while paused", derr
	}
	return "", fmt.Errorf("reaper: %s kept changing", id)
}

func (s *Service) snapStore(ctx context.Context) (jetstream.ObjectStore, error) {
	st, err := s.js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		return nil, fmt.Errorf("reaper: snapshots: %w", err)
	}
	return st, nil
}

// deleteSnapshot removes a snapshot: its manifest first (it is incomplete
// from then on), then its data.
func (s *Service) deleteSnapshot(ctx context.Context, id string) error {
	st, err := s.snapStore(ctx)
	if err != nil {
		return err
	}
	for _, name := range []string{events.SnapshotManifestName(id), events.SnapshotDataName(id)} {
		if err := st.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("reaper: delete %s: %w", name, err)
		}
	}
	return nil
}

// classifyPaused is the sweep's rule for a paused sandbox: nothing until
// its retention ends, then expirePaused.
func (sw *sweepRun) classifyPaused(ctx context.Context, sb events.Sandbox) {
	if sb.Deadline.IsZero() || sw.now.Before(sb.Deadline) {
		return
	}
	f := Finding{Kind: FindingPausedExpired, SandboxID: sb.SandboxID, Backend: sb.Backend, Deadline: sb.Deadline,
		Action: "delete snapshot, mark gone"}
	if !sw.dryRun {
		did, err := sw.s.expirePaused(ctx, sb.SandboxID)
		f.Action = did
		if err != nil {
			f.Err = err.Error()
		}
	}
	sw.add(f)
}

// sweepSnapshots removes expired snapshots (never a paused sandbox's own:
// that goes with the sandbox), manifest-less data objects and stray chunks
// older than snapshotOrphanAge.
func (sw *sweepRun) sweepSnapshots(ctx context.Context, sandboxes []events.Sandbox) {
	st, err := sw.s.snapStore(ctx)
	if err != nil {
		return // no bucket: nothing durable on this bus
	}
	infos, err := st.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		sw.add(Finding{Kind: FindingSnapshotOrphan, Action: "skipped: cannot list snapshots", Err: err.Error()})
		return
	}
	held := map[string]bool{} // snapshots of paused sandboxes
	for _, sb := range sandboxes {
		if sb.State == events.StatePaused && sb.Durable != nil {
			held[sb.Durable.SnapshotID] = true
		}
	}
	manifests := map[string]bool{}
	for _, oi := range infos {
		if id, ok := strings.CutSuffix(oi.Name, "/manifest"); ok {
			manifests[id] = true
		}
	}
	nuids := map[string]bool{}
	for _, oi := range infos {
		nuids[oi.NUID] = true
		id, kind, _ := strings.Cut(oi.Name, "/")
		var f Finding
		switch {
		case kind == "manifest" && !held[id]:
			exp, err := time.Parse(time.RFC3339, oi.Metadata["expires"])
			if err != nil || sw.now.Before(exp) {
				continue
			}
			f = Finding{Kind: FindingSnapshotExpiry, SandboxID: oi.Metadata["sandbox"], Deadline: exp, Action: "delete snapshot " + id}
		case kind == "data" && !manifests[id] && sw.now.Sub(oi.ModTime) >= snapshotOrphanAge:
			f = Finding{Kind: FindingSnapshotOrphan, SandboxID: oi.Metadata["sandbox"], Action: "delete incomplete snapshot " + id}
		default:
			continue
		}
		if !sw.dryRun {
			if err := sw.s.deleteSnapshot(ctx, id); err != nil {
				f.Err = err.Error()
			}
		}
		sw.add(f)
	}
	sw.sweepStrayChunks(ctx, nuids)
}

// sweepStrayChunks purges the chunk subjects of uploads that never got
// their object's meta (a worker killed mid-upload), once old enough.
func (sw *sweepRun) sweepStrayChunks(ctx context.Context, live map[string]bool) {
	stream, err := sw.s.js.Stream(ctx, "OBJ_"+events.BucketSnapshots)
	if err != nil {
		return
	}
	prefix := "$O." + events.BucketSnapshots + ".C."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return
	}
	for subj := range info.State.Subjects {
		nuid := strings.TrimPrefix(subj, prefix)
		if live[nuid] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subj)
		if err != nil || sw.now.Sub(last.Time) < snapshotOrphanAge {
			continue
		}
		f := Finding{Kind: FindingSnapshotOrphan, Action: "purge stray chunks " + nuid}
		if !sw.dryRun {
			if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				f.Err = err.Error()
			}
		}
		sw.add(f)
	}
}
