package worker

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/recordtest"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func recordCases() []events.OpRecord {
	t0 := time.Date(2026, 12, 1, 18, 0, 0, 123456789, time.UTC)
	t1 := t0.Add(1500 * time.Millisecond)
	zone := time.FixedZone("x", -(7*3600 + 30*60))
	far := time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)
	exit := -3
	zero := 0
	return []events.OpRecord{
		{},
		{OpID: "op1", Kind: "exec", Phase: events.EventOpened, SandboxID: "sb", Backend: "fake", Worker: "w1", StartedAt: t0,
			Summary: map[string]string{"cmd": "echo hi", "class": "fake"}, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{OpID: "op1", Kind: "exec", Phase: events.EventClosed, SandboxID: "sb", Backend: "fake", Worker: "w1", ProcessID: "p1",
			Owner: "tenant-a", StartedAt: t0, EndedAt: &t1, DurationMS: 1500, Outcome: events.OutcomeError,
			ErrorCode: events.CodeExecutionTimeout, Error: "ran <past> its \"timeout\" & more\n\t\x01\x7f",
			ExitCode: &exit, BytesIn: 7, BytesOut: -9, Metadata: map[string]string{"b": "2", "a": "1", "": "empty key"}},
		{OpID: "bad\xff\xfeutf8", Kind: "ü\u2028\u2029\u00e9", StartedAt: t0.In(zone), ExitCode: &zero,
			Summary: map[string]string{"k\xc3": "v\xc3\x28", "\b\f\r": "\x00"}},
		{StartedAt: far},               // encoding/json refuses the year
		{StartedAt: t0, EndedAt: &far}, // and here
		{StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("odd", 3600+59))},
	}
}

// TestMarshalRecordIsJSONMarshal holds the record encoder to encoding/json,
// byte for byte, errors included.
func TestMarshalRecordIsJSONMarshal(t *testing.T) {
	for i, rec := range recordCases() {
		want, werr := json.Marshal(rec)
		got, gerr := marshalRecord(&rec)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("case %d: error %v, encoding/json %v", i, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestMarshalRecordAllocatesOnce: a closed exec record's encoding is one
// allocation (encoding/json took 10).
func TestMarshalRecordAllocatesOnce(t *testing.T) {
	rec := recordCases()[2]
	if n := testing.AllocsPerRun(100, func() { _, _ = marshalRecord(&rec) }); n > 1 {
		t.Fatalf("%v allocations a record, want 1", n)
	}
}

func FuzzMarshalRecord(f *testing.F) {
	f.Add("op", "exec", "sb", "a <b> & \"c\"\n", "k", "v\xff", int64(1700000000123456789), int64(5), -1, true)
	f.Add("\u2028", "", "", "", "", "", int64(0), int64(0), 0, false)
	f.Fuzz(func(t *testing.T, id, kind, sb, msg, k, v string, ns, dur int64, exit int, withEnd bool) {
		t0 := time.Unix(0, ns).UTC()
		rec := events.OpRecord{OpID: id, Kind: kind, SandboxID: sb, Error: msg, StartedAt: t0, DurationMS: dur,
			Summary: map[string]string{k: v, v: k}, Owner: msg, ErrorCode: events.Code(k)}
		if withEnd {
			t1 := t0.Add(time.Duration(dur))
			rec.EndedAt = &t1
			rec.ExitCode = &exit
			rec.Metadata = map[string]string{msg: id}
		}
		want, werr := json.Marshal(rec)
		got, gerr := marshalRecord(&rec)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("got %s (%v)\nwant %s (%v)", got, gerr, want, werr)
		}
	})
}

// BenchmarkMarshalRecord: a closed exec record, by encoding/json and by hand.
func BenchmarkMarshalRecord(b *testing.B) {
	rec := recordCases()[2]
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(rec)
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = marshalRecord(&rec)
		}
	})
}

// fullRecord is a record with every field set (recordtest.FullRecord).
func fullRecord(t testing.TB) events.OpRecord {
	t.Helper()
	rec, err := recordtest.FullRecord()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestMarshalRecordKnowsEveryField: a record with every field set encodes
// as encoding/json encodes it, so a field added to events.OpRecord without
// marshalRecord learning it fails here.
func TestMarshalRecordKnowsEveryField(t *testing.T) {
	rec := fullRecord(t)
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := marshalRecord(&rec)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %s (%v)\nwant %s", got, err, want)
	}
}
