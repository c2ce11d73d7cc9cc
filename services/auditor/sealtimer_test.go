package auditor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestQuietLogSealedOnTimer: the lines after the last checkpoint (up to
// CheckpointEvery, 1,024 by default) could be cut from a live log
// undetected for as long as no more lines came. Now a checkpoint follows
// once the oldest unsealed line is CheckpointInterval old: a log of three
// records, with CheckpointEvery far away, ends in a checkpoint, published
// in sbx_audit, while the auditor still runs, and verifies sealed (no open
// tail) against the published checkpoint.
func TestQuietLogSealedOnTimer(t *testing.T) {
	e := startEnv(t)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	path := filepath.Join(e.dir, "audit.jsonl")
	s, err := New(Config{LogPath: path, SigningSeed: seed, CheckpointEvery: 1024, CheckpointInterval: 300 * time.Millisecond}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	runService(t, s)
	for i := range 3 {
		publish(t, e.js, record(opID(i), "exec", events.EventClosed), "")
	}
	var cp *Checkpoint
	eventually(t, 20*time.Second, "a published checkpoint of the three records", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cp, err = FetchCheckpoint(ctx, e.js, "", []string{pub})
		return err == nil && cp.Seq == 3
	})
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyWith(bytes.NewReader(whole), VerifyOptions{AuditorKeys: []string{pub}, Checkpoint: cp})
	if err != nil || rep.Records != 3 || rep.OpenTail != 0 {
		t.Fatalf("the live log: %v, %d records, %d lines after the last checkpoint (%+v)", err, rep.Records, rep.OpenTail, rep.Problems)
	}
}

// TestOpenTrustsOnlyOwnCheckpoints: OpenLog resumed from the log's last
// checkpoint whoever had signed it, so whoever could write the file could
// change sealed lines, recompute the chain, sign the checkpoints with a
// key of their own, and the auditor went on appending to the rewritten
// log. A log opened with its persistent key resumes only from a
// checkpoint of that key and refuses one of another; one opened with a
// key new to this process trusts no checkpoint and checks the whole log.
func TestOpenTrustsOnlyOwnCheckpoints(t *testing.T) {
	worker, auditor, attacker := newKey(t), newKey(t), newKey(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	lines := sealedLog(t, path, worker, auditor)

	t.Run("rewritten and re-signed by another key", func(t *testing.T) {
		var edited []string
		for _, l := range lines {
			edited = append(edited, strings.Replace(l, `"bytes_out":200`, `"bytes_out":201`, 1))
		}
		p := filepath.Join(dir, "rewritten.jsonl")
		if err := os.WriteFile(p, rechain(t, edited, attacker), 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := openLogWith(p, logOptions{key: auditor, every: 4})
		if err == nil {
			t.Fatalf("the rewritten log was opened (%d lines checked): its checkpoints are the attacker's", l.Verified())
		}
		if !errors.Is(err, events.ErrAuditTampered) {
			t.Fatalf("the rewritten log: %v, want SBX_E1502", err)
		}
	})

	t.Run("own key resumes", func(t *testing.T) {
		p := filepath.Join(dir, "own.jsonl")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := openLogWith(p, logOptions{key: auditor, every: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer l.f.Close()
		if l.Verified() != 1 {
			t.Fatalf("%d lines checked, want 1 (the last, its own checkpoint)", l.Verified())
		}
	})

	t.Run("a new key checks the whole log", func(t *testing.T) {
		p := filepath.Join(dir, "newkey.jsonl")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := openLogWith(p, logOptions{every: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer l.f.Close()
		if l.Verified() != len(lines) {
			t.Fatalf("%d lines checked, want all %d: no checkpoint is this key's", l.Verified(), len(lines))
		}
	})

	t.Run("a checkpoint of another key after the own one", func(t *testing.T) {
		// Lines appended after the last checkpoint and sealed with another
		// key: the chain holds, the seal is not the auditor's.
		var last Entry
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
			t.Fatal(err)
		}
		var cp Checkpoint
		if err := json.Unmarshal(last.Record, &cp); err != nil {
			t.Fatal(err)
		}
		forged, err := newCheckpoint(attacker, cp.Log, last.Seq, last.Hash, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([]string(nil), lines...), mustLine(t, forged))
		p := filepath.Join(dir, "appended.jsonl")
		if err := os.WriteFile(p, relink(t, all), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := openLogWith(p, logOptions{key: auditor, every: 4}); !errors.Is(err, events.ErrAuditTampered) {
			t.Fatalf("a log sealed last by another key: %v, want SBX_E1502", err)
		}
	})
}

func mustLine(t *testing.T, e Entry) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// relink gives the last line its seq, link and hash after the others
// (which are left as they are).
func relink(t *testing.T, lines []string) []byte {
	t.Helper()
	var prev, last Entry
	if err := json.Unmarshal([]byte(lines[len(lines)-2]), &prev); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	last.Seq, last.PrevHash, last.Hash = prev.Seq+1, prev.Hash, ""
	b, _ := json.Marshal(last)
	canon, _, err := canonical(b)
	if err != nil {
		t.Fatal(err)
	}
	last.Hash = chainHash(prev.Hash, canon)
	return []byte(strings.Join(lines[:len(lines)-1], "") + mustLine(t, last))
}
