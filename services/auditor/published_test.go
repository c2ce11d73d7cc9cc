package auditor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestPublishedCheckpointShowsTruncation: an auditor restarted with the same
// SigningSeed signs with the same key, so the whole log verifies against
// that one pinned key across the restart; the auditor publishes its latest
// checkpoint in KV sbx_audit, and a log whose tail was cut back to an
// earlier checkpoint (which verifies on its own) fails verify against the
// published one.
func TestPublishedCheckpointShowsTruncation(t *testing.T) {
	e := startEnv(t)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	path := filepath.Join(e.dir, "audit.jsonl")
	n := 0
	for run := range 2 {
		s, err := New(Config{LogPath: path, SigningSeed: seed, CheckpointEvery: 4}, e.nc)
		if err != nil {
			t.Fatal(err)
		}
		if s.CheckpointKey() != pub {
			t.Fatalf("run %d: checkpoint key %s, want the seed's %s", run, s.CheckpointKey(), pub)
		}
		stop := runService(t, s)
		for range 10 {
			n++
			publish(t, e.js, record(opID(n), "exec", events.EventClosed), "")
		}
		eventually(t, 10*time.Second, "records written", func() bool { return s.Written() >= 10 })
		stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := FetchCheckpoint(ctx, e.js, "", []string{pub})
	if err != nil {
		t.Fatalf("published checkpoint: %v", err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := VerifyOptions{AuditorKeys: []string{pub}, Checkpoint: cp}
	if rep, err := VerifyWith(bytes.NewReader(whole), opts); err != nil {
		t.Fatalf("the whole log across the restart: %v (%+v)", err, rep.Problems)
	}

	// Cut the tail back to the end of the checkpoint before the last one.
	lines := bytes.SplitAfter(whole, []byte("\n"))
	var ends []int // byte offsets after each checkpoint line
	off := 0
	for _, l := range lines {
		off += len(l)
		var en Entry
		if json.Unmarshal(l, &en) == nil && en.Type == TypeCheckpoint {
			ends = append(ends, off)
		}
	}
	if len(ends) < 2 {
		t.Fatalf("%d checkpoints, want at least 2", len(ends))
	}
	cut := whole[:ends[len(ends)-2]]
	if rep, err := VerifyWith(bytes.NewReader(cut), VerifyOptions{AuditorKeys: []string{pub}}); err != nil {
		t.Fatalf("the cut log, without the published checkpoint, should verify on its own (the attack): %v (%+v)", err, rep.Problems)
	}
	rep, err := VerifyWith(bytes.NewReader(cut), opts)
	if !errors.Is(err, events.ErrAuditTampered) || len(rep.Problems) == 0 || rep.Problems[len(rep.Problems)-1].Kind != ProblemTruncated {
		t.Fatalf("the cut log against the published checkpoint: err %v, problems %+v; want %s", err, rep.Problems, ProblemTruncated)
	}
}
