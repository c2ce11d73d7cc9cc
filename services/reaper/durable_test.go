package reaper

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestPausedAndSnapshotsRetention: a paused sandbox (no worker, no lease)
// is never marked lost; once its retention ends it is removed with its
// snapshot and an expire_paused record, and nothing else is: a paused
// sandbox within its retention keeps its snapshot even past that
// snapshot's own expiry; a free snapshot past its expiry goes, one within
// it stays; a data object without its manifest and chunks of an upload
// that never finished go once old enough.
func TestPausedAndSnapshotsRetention(t *testing.T) {
	defer func(d time.Duration) { snapshotOrphanAge = d }(snapshotOrphanAge)
	snapshotOrphanAge = 0
	e := startEnv(t)
	ctx := context.Background()
	st, err := e.js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	snap := func(id, kind string, expires time.Time, manifest bool) {
		if _, err := st.PutBytes(ctx, events.SnapshotDataName(id), []byte("data")); err != nil {
			t.Fatal(err)
		}
		if !manifest {
			return
		}
		if _, err := st.Put(ctx, jetstream.ObjectMeta{Name: events.SnapshotManifestName(id), Metadata: map[string]string{
			"kind": kind, "tenant": "_open", "bytes": "4", "expires": expires.UTC().Format(time.RFC3339)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	snap("snap-a", events.SnapshotKindPause, past, true)
	snap("snap-b", events.SnapshotKindPause, past, true)
	snap("snap-c", events.SnapshotKindSnapshot, past, true)
	snap("snap-d", events.SnapshotKindSnapshot, future, true)
	snap("snap-e", "", time.Time{}, false)
	if _, err := e.js.Publish(ctx, "$O."+events.BucketSnapshots+".C.straynuid", []byte("half an upload")); err != nil {
		t.Fatal(err)
	}
	paused := func(id, snapshot string, deadline time.Time) {
		putRecord(t, e, events.Sandbox{SandboxID: id, Backend: "docker", State: events.StatePaused, CreatedAt: now.Add(-2 * time.Hour),
			Deadline: deadline, Durable: &events.DurableState{SnapshotID: snapshot, Store: events.BucketSnapshots}})
	}
	paused("p-expired", "snap-a", past)
	paused("p-kept", "snap-b", future)

	s, err := New(Config{InstanceID: "t", CreationGrace: time.Second, LostGrace: time.Millisecond}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Sweep(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors() != 0 {
		t.Fatalf("sweep errors: %+v", rep.Findings)
	}
	if sb, _ := getSandbox(t, e, "p-expired"); sb.State != events.StateGone || sb.EndReason != EndReasonPausedExpiry {
		t.Errorf("expired paused sandbox: %s %q", sb.State, sb.EndReason)
	}
	if sb, _ := getSandbox(t, e, "p-kept"); sb.State != events.StatePaused {
		t.Errorf("paused sandbox within its retention: %s %q, want paused", sb.State, sb.EndReason)
	}
	want := map[string]bool{"snap-a/manifest": false, "snap-a/data": false, "snap-b/manifest": true, "snap-b/data": true,
		"snap-c/manifest": false, "snap-c/data": false, "snap-d/manifest": true, "snap-d/data": true, "snap-e/data": false}
	for name, kept := range want {
		_, err := st.GetInfo(ctx, name)
		if (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v (%v)", name, err == nil, kept, err)
		}
	}
	stream, _ := e.js.Stream(ctx, "OBJ_"+events.BucketSnapshots)
	if _, err := stream.GetLastMsgForSubject(ctx, "$O."+events.BucketSnapshots+".C.straynuid"); err == nil {
		t.Error("the stray chunks of an unfinished upload are still there")
	}
	if recs := records(t, e, KindExpirePaused); len(recs) != 1 || recs[0].SandboxID != "p-expired" || recs[0].Outcome != events.OutcomeOK {
		t.Errorf("closed expire_paused records: %+v, want p-expired's", recs)
	}
}
