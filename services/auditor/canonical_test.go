package auditor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestCanonicalEntry holds the hand-built canonical form of an entry (the
// bytes its chain hash is over) to canonical(json.Marshal(entry)), the
// form Verify recomputes, across hostile strings and omitted fields.
func TestCanonicalEntry(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 123456789, time.UTC)
	for _, e := range []Entry{
		{ID: "op-opened", Type: "io.sandboxio.op.opened", Source: "sandboxio/worker/w1", Time: at, Subject: "sbx.ops.fake.s.opened",
			Seq: 7, StreamSeq: 42, Record: json.RawMessage(`{"op_id":"op","n":1.50,"z":[1,2,{"b":null,"a":true}]}`), Sig: SigOK, Signer: "UABC", PrevHash: GenesisHash},
		{ID: "x", Time: at.In(time.FixedZone("x", 3600)), Seq: 1, Record: json.RawMessage(`{}`)},
		{ID: "<script>&\u2028\u2029\"\\\n\t\x01", Source: "\xff\xfe invalid utf-8", Subject: "é 日本", Seq: 1 << 60,
			Record: json.RawMessage(`{"s":"<&>\u00e9\ud83d\ude00","big":123456789012345678901234567890,"e":1e400}`), Sig: SigInvalid},
		{ID: "null-record", Seq: 2, Record: json.RawMessage(`null`)},
		{ID: "array-record", Seq: 3, Record: json.RawMessage(`[ 1 , "two" ]`)},
	} {
		rec, err := canonicalValue(e.Record)
		if err != nil {
			t.Fatalf("%q: %v", e.ID, err)
		}
		e.Record = rec
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := canonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := canonicalEntry(e); !bytes.Equal(got, want) {
			t.Errorf("%q:\n got %s\nwant %s", e.ID, got, want)
		}
	}
}

// FuzzCanonicalEntry: for any strings and record, the fast canonical form
// is the slow one.
func FuzzCanonicalEntry(f *testing.F) {
	f.Add("id", "src", "subj", "sig", `{"a":1}`, uint64(1), uint64(0))
	f.Add("<&>", "\xff", "\u2028", "", `[1,"x",null]`, uint64(0), uint64(9))
	f.Fuzz(func(t *testing.T, id, source, subject, signer, record string, seq, streamSeq uint64) {
		rec, err := canonicalValue([]byte(record))
		if err != nil {
			return // Append refuses it
		}
		e := Entry{ID: id, Source: source, Subject: subject, Signer: signer, Sig: signer, Type: source, PrevHash: id,
			Seq: seq, StreamSeq: streamSeq, Time: time.Unix(int64(seq%1e10), int64(streamSeq%1e9)).UTC(), Record: rec}
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := canonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := canonicalEntry(e); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAppend: records/s the audit log takes in batches of 64, each
// batch written and fsync'd (the auditor's group commit).
func BenchmarkAppend(b *testing.B) {
	l, err := OpenLog(b.TempDir() + "/audit.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := json.RawMessage(`{"op_id":"01abc","kind":"exec","phase":"closed","sandbox_id":"01s","backend":"fake","worker":"01w","started_at":"2026-12-01T12:00:00Z","summary":{"cmd":"echo hi","process_id":"01p"},"outcome":"ok","exit_code":0}`)
	batch := make([]Entry, 64)
	n := 0
	for b.Loop() {
		for i := range batch {
			n++
			batch[i] = Entry{ID: "op-" + strconv.Itoa(n) + "-closed", Type: "io.sandboxio.op.closed", Source: "sandboxio/worker/w",
				Time: time.Now().UTC(), Subject: "sbx.ops.fake.s.closed", StreamSeq: uint64(n), Record: rec, Sig: SigOK, Signer: "UABC"}
		}
		if _, err := l.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAuditorThroughput: records/s the auditor sustains end to end —
// consumed from SBX_OPS, signature verified against a trusted key,
// canonicalised, hash-chained, written and fsync'd per batch, acked —
// with b.N signed records queued before it starts, each signed alone or
// in batches of 16 (a worker's 2 ms window at 4,000 execs/s, ADR 17). Run
// with e.g. -benchtime 20000x.
func BenchmarkAuditorThroughput(b *testing.B) {
	for _, per := range []int{1, 16} {
		b.Run(fmt.Sprintf("signed=%d", per), func(b *testing.B) { auditorThroughput(b, per) })
	}
}

func auditorThroughput(b *testing.B, per int) {
	e := startEnv(b)
	key, err := recsign.NewKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var batch []*nats.Msg
	for i := range b.N {
		rec := record(opID(i), events.OpExec, events.EventClosed)
		data, _ := json.Marshal(rec)
		m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
			ID: rec.OpID + "-" + rec.Phase, Type: events.TypeOpClosed, Source: "sandboxio/worker/w1", Subject: rec.SandboxID, Data: data})
		if err != nil {
			b.Fatal(err)
		}
		if batch = append(batch, m); len(batch) < per && i < b.N-1 {
			continue
		}
		key.SignBatch(batch)
		for _, m := range batch {
			if _, err := e.js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		batch = batch[:0]
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("records not stored")
	}
	s, err := New(Config{LogPath: e.dir + "/audit.jsonl", TrustedSigners: []string{key.Public()}}, e.nc)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	stop := runService(b, s)
	for s.Written() < uint64(b.N) {
		if ctx.Err() != nil {
			b.Fatalf("%d of %d records written", s.Written(), b.N)
		}
		time.Sleep(time.Millisecond) // polling the count the benchmark measures
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
}

// TestAppendAllocations: appending a batch allocates no line per record and
// no growing buffer per batch (the encoder and its buffer are kept), and
// canonicalises a record without a string per key or new scratch per
// object (60 allocations a record before, 8 after).
func TestAppendAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector drops sync.Pool items on purpose")
	}
	l, err := OpenLog(t.TempDir() + "/audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rec := json.RawMessage(`{"op_id":"01abc","kind":"exec","phase":"closed","sandbox_id":"01s","backend":"fake","worker":"01w","started_at":"2026-12-01T12:00:00Z","summary":{"cmd":"echo hi","process_id":"01p"},"outcome":"ok","exit_code":0}`)
	const runs, size = 20, 64
	batches := make([][]Entry, runs+1)
	n := 0
	for b := range batches {
		batches[b] = make([]Entry, size)
		for i := range batches[b] {
			n++
			batches[b][i] = Entry{ID: "op-" + strconv.Itoa(n) + "-closed", Type: "io.sandboxio.op.closed", Source: "sandboxio/worker/w",
				Time: time.Now().UTC(), Subject: "sbx.ops.fake.s.closed", StreamSeq: uint64(n), Record: rec, Sig: SigOK, Signer: "UABC"}
		}
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		if _, err := l.Append(batches[next]); err != nil {
			t.Fatal(err)
		}
		next++
	})
	if perRecord := allocs / size; perRecord > 7 { // 8.2 before appendLine
		t.Fatalf("%.1f allocations per record appended, want at most 7", perRecord)
	}
	t.Logf("%.1f allocations per record", allocs/size)
}
