package auditor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func newKey(t testing.TB) *recsign.Key {
	t.Helper()
	k, err := recsign.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedEntry is a record line's entry as the Service makes it from a
// record message worker signed (nil: unsigned, as a forgery).
func signedEntry(t testing.TB, worker *recsign.Key, sandbox string, i int) Entry {
	t.Helper()
	rec := record(opID(i), events.OpExec, events.EventClosed)
	rec.SandboxID = sandbox
	data, _ := json.Marshal(rec)
	e := Entry{ID: opID(i) + "-closed", Type: events.TypeOpClosed, Source: "sandboxio/worker/w1", Time: time.Unix(int64(i), 0).UTC(),
		Subject: events.OpsSubject("fake", sandbox, events.EventClosed), Record: data, Sig: SigMissing}
	if worker != nil {
		m := nats.NewMsg(e.Subject)
		m.Header.Set(events.HeaderCEID, e.ID)
		m.Data = data
		if err := worker.Sign(m); err != nil {
			t.Fatal(err)
		}
		e.Sig, e.Signer = SigOK, worker.Public()
		e.Signature, e.SigBatch = m.Header.Get(events.HeaderSignature), m.Header.Get(events.HeaderSignatureBatch)
	}
	return e
}

// sealedLog writes a closed log of records of sandboxes a and b (one of
// them unsigned) with a checkpoint every 4 lines, and returns its lines.
func sealedLog(t *testing.T, path string, worker, auditor *recsign.Key) []string {
	t.Helper()
	l, err := openLogWith(path, logOptions{key: auditor, every: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		sb, k := "a", worker
		if i%3 == 1 {
			sb = "b"
		}
		if i == 5 {
			k = nil // a forgery: flagged, never dropped
		}
		if _, err := l.Append([]Entry{signedEntry(t, k, sb, i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return lines[:len(lines)-1] // after the last newline: nothing
}

// rechain is what whoever can write the file does after changing lines:
// renumber them, recompute every hash, and sign every checkpoint again with
// their own key (they do not have the auditor's).
func rechain(t *testing.T, lines []string, key *recsign.Key) []byte {
	t.Helper()
	var out bytes.Buffer
	head := GenesisHash
	seq := uint64(0)
	for _, line := range lines {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == TypeCheckpoint {
			var cp Checkpoint
			_ = json.Unmarshal(e.Record, &cp)
			var err error
			if e, err = newCheckpoint(key, cp.Log, seq, head, e.Time); err != nil {
				t.Fatal(err)
			}
		}
		seq++
		e.Seq, e.PrevHash, e.Hash = seq, head, ""
		b, _ := json.Marshal(e)
		canon, _, err := canonical(b)
		if err != nil {
			t.Fatal(err)
		}
		e.Hash = chainHash(head, canon)
		head = e.Hash
		b, _ = json.Marshal(e)
		out.Write(append(b, '\n'))
	}
	return out.Bytes()
}

// TestVerifyDetectsRewrites: `audit verify`'s check, from the file and the
// public keys alone, passes an untouched log and fails each rewrite by
// someone who can write the file but has not the auditor's key: a line
// changed and the chain recomputed, an unsigned record's "sig" forged to
// ok, a sandbox's lines dropped and the rest renumbered, the tail cut off.
func TestVerifyDetectsRewrites(t *testing.T) {
	worker, auditor, attacker := newKey(t), newKey(t), newKey(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	lines := sealedLog(t, path, worker, auditor)
	opts := VerifyOptions{TrustedSigners: []string{worker.Public()}, AuditorKeys: []string{auditor.Public()}}

	rep, err := VerifyWith(bytes.NewReader([]byte(strings.Join(lines, ""))), opts)
	if err != nil || rep.UnverifiedCount != 1 || rep.Signed != 9 || rep.Checkpoints < 3 || rep.OpenTail != 0 {
		t.Fatalf("untouched log: %v %+v", err, rep)
	}

	edit := func(f func(i int, line string) (string, bool)) []string {
		var out []string
		for i, line := range lines {
			if l, keep := f(i, line); keep {
				out = append(out, l)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"line changed, chain recomputed", rechain(t, edit(func(_ int, l string) (string, bool) {
			return strings.Replace(l, `"bytes_out":200`, `"bytes_out":201`, 1), true
		}), attacker)},
		{"unsigned record's sig forged ok", rechain(t, edit(func(_ int, l string) (string, bool) {
			return strings.Replace(l, `"sig":"missing"`, `"sig":"ok","signer":"`+worker.Public()+`"`, 1), true
		}), attacker)},
		{"a sandbox's lines dropped, renumbered", rechain(t, edit(func(_ int, l string) (string, bool) {
			return l, !strings.Contains(l, `"sandbox_id":"b"`)
		}), attacker)},
		{"tail cut off", []byte(strings.Join(lines[:len(lines)-2], ""))},
		{"tail cut off at a checkpoint", []byte(strings.Join(cutAfterCheckpoint(t, lines), ""))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := VerifyWith(bytes.NewReader(tc.file), opts)
			if tc.name == "tail cut off at a checkpoint" {
				// The file alone cannot show it: the checkpoint the
				// auditor published last does.
				if err != nil {
					t.Fatalf("a log cut at a checkpoint verifies alone: %v", err)
				}
				last := *rep.LastCheckpoint
				o := opts
				o.Checkpoint = lastCheckpointOf(t, lines)
				if last == *o.Checkpoint {
					t.Fatal("the cut kept the last checkpoint")
				}
				rep, err = VerifyWith(bytes.NewReader(tc.file), o)
			}
			if err == nil {
				t.Fatalf("verify passes the rewritten log: %+v", rep)
			}
			t.Logf("found: %v", err)
		})
	}
}

// cutAfterCheckpoint is lines cut just after their second to last
// checkpoint.
func cutAfterCheckpoint(t *testing.T, lines []string) []string {
	t.Helper()
	n := 0
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], `"type":"`+TypeCheckpoint+`"`) {
			if n++; n == 2 {
				return append([]string(nil), lines[:i+1]...)
			}
		}
	}
	t.Fatal("fewer than two checkpoints")
	return nil
}

func lastCheckpointOf(t *testing.T, lines []string) *Checkpoint {
	t.Helper()
	var e Entry
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &e); err != nil || e.Type != TypeCheckpoint {
		t.Fatalf("the last line is not a checkpoint: %v", err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(e.Record, &cp); err != nil {
		t.Fatal(err)
	}
	return &cp
}

// TestOpenResumesFromCheckpoint: opening a log checks the lines after its
// last checkpoint, not the whole log: as many lines for a log ten times
// longer.
func TestOpenResumesFromCheckpoint(t *testing.T) {
	auditor := newKey(t)
	verified := map[int]int{}
	for _, n := range []int{1000, 10000} {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("audit-%d.jsonl", n))
		l, err := openLogWith(path, logOptions{key: auditor, every: 100, indexSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		var batch []Entry
		for i := range n {
			batch = append(batch, signedEntry(t, nil, "a", i))
			if len(batch) == 64 || i == n-1 {
				if _, err := l.Append(batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		// A crash: the lines after the last checkpoint are not sealed.
		if err := l.f.Close(); err != nil {
			t.Fatal(err)
		}
		l, err = openLogWith(path, logOptions{key: auditor, every: 100, indexSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		verified[n] = l.Verified()
		if l.Len() <= uint64(n) || !l.Has(opID(n-1)+"-closed") || !l.Has(opID(n-50)+"-closed") {
			t.Errorf("%d records: reopened with %d lines, index has the last: %v, the 50th last: %v", n, l.Len(),
				l.Has(opID(n-1)+"-closed"), l.Has(opID(n-50)+"-closed"))
		}
		if w, err := l.Append([]Entry{signedEntry(t, nil, "a", n-1)}); err != nil || len(w) != 0 {
			t.Errorf("a record of the index written again: %d %v", len(w), err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(path)
		rep, err := VerifyWith(f, VerifyOptions{AuditorKeys: []string{auditor.Public()}})
		f.Close()
		if err != nil || rep.Records != n {
			t.Fatalf("%d records: verify after reopen: %v, %d records", n, err, rep.Records)
		}
	}
	// A checkpoint follows the batch (64) that brings the lines since the
	// last to 100: at most 163 lines follow one, and its line is checked.
	for n, v := range verified {
		if v < 1 || v > 164 {
			t.Errorf("%d records: %d lines checked at open; want the at most 164 from the last checkpoint on", n, v)
		}
	}
}
