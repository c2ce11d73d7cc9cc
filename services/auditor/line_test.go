package auditor

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func encoderLine(t testing.TB, e Entry) []byte {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(e); err != nil {
		return nil
	}
	return buf.Bytes()
}

// TestLineIsEncoderOutput: a line written by appendLine is json.Encoder's,
// byte for byte; what it does not take, it leaves to the encoder.
func TestLineIsEncoderOutput(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 18, 0, 0, 123456789, time.UTC)
	rec := json.RawMessage(`{"kind":"exec","op_id":"01abc","summary":{"cmd":"echo hi"}}`)
	base := Entry{Seq: 7, ID: "op-closed", Type: "io.sandboxio.v1.op.closed", Source: "sandboxio/worker/w", Time: t0,
		Subject: "sbx.ops.fake.s.closed", StreamSeq: 9, Record: rec, Sig: SigOK, Signer: "UABC", PrevHash: "ab", Hash: "cd"}
	for _, c := range []struct {
		name string
		mod  func(*Entry)
		fast bool
	}{
		{"typical", func(*Entry) {}, true},
		{"no stream seq, no signature", func(e *Entry) { e.StreamSeq, e.Sig, e.Signer = 0, "", "" }, true},
		{"zone", func(e *Entry) { e.Time = t0.In(time.FixedZone("x", 5400)) }, true},
		{"record with <", func(e *Entry) { e.Record = json.RawMessage(`{"cmd":"a<b"}`) }, false},
		{"record with U+2028", func(e *Entry) { e.Record = json.RawMessage("{\"cmd\":\"a\u2028b\"}") }, false},
		{"record with é", func(e *Entry) { e.Record = json.RawMessage(`{"cmd":"é"}`) }, true},
		{"id with a quote", func(e *Entry) { e.ID = `a"b` }, false},
		{"subject not ASCII", func(e *Entry) { e.Subject = "sbx.ops.ü" }, false},
		{"year 12000", func(e *Entry) { e.Time = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		{"no record", func(e *Entry) { e.Record = nil }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := base
			c.mod(&e)
			prefix := []byte("keep")
			got, ok := appendLine(prefix, &e)
			if ok != c.fast {
				t.Fatalf("fast path %v, want %v", ok, c.fast)
			}
			if !ok {
				if string(got) != "keep" {
					t.Fatalf("refused, but wrote %q", got)
				}
				return
			}
			if want := encoderLine(t, e); !bytes.Equal(got[4:], want) {
				t.Fatalf("\n got %s\nwant %s", got[4:], want)
			}
		})
	}
}

func FuzzLine(f *testing.F) {
	f.Add(uint64(1), "id", "type", "src", "subj", uint64(3), `{"a":"b"}`, "OK", "U", "p", "h", int64(1764612000123456789))
	f.Add(uint64(0), "", "", "", "", uint64(0), `{"a":"<"}`, "", "", "", "", int64(-1))
	f.Fuzz(func(t *testing.T, seq uint64, id, typ, src, subj string, sseq uint64, rec, sig, signer, prev, hash string, ns int64) {
		canon, err := canonicalValue([]byte(rec))
		if err != nil {
			return
		}
		e := Entry{Seq: seq, ID: id, Type: typ, Source: src, Time: time.Unix(0, ns).UTC(), Subject: subj, StreamSeq: sseq,
			Record: canon, Sig: sig, Signer: signer, PrevHash: prev, Hash: hash}
		got, ok := appendLine(nil, &e)
		if !ok {
			return
		}
		if want := encoderLine(t, e); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestLineAllocatesNothing: with room in the buffer, a line is written
// without allocating (json.Encoder allocated for each).
func TestLineAllocatesNothing(t *testing.T) {
	e := Entry{Seq: 7, ID: "op-closed", Type: "io.sandboxio.v1.op.closed", Source: "sandboxio/worker/w", Time: time.Now().UTC(),
		Subject: "sbx.ops.fake.s.closed", StreamSeq: 9, Record: json.RawMessage(`{"kind":"exec"}`), PrevHash: "ab", Hash: "cd"}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { _, _ = appendLine(buf, &e) }); n > 0 {
		t.Fatalf("%v allocations a line", n)
	}
}

// BenchmarkLine: one log line, by json.Encoder and by appendLine.
func BenchmarkLine(b *testing.B) {
	rec, _ := canonicalValue([]byte(`{"op_id":"01abc","kind":"exec","phase":"closed","sandbox_id":"01s","backend":"fake","worker":"01w","started_at":"2026-12-01T12:00:00Z","summary":{"cmd":"echo hi","process_id":"01p"},"outcome":"ok","exit_code":0}`))
	e := Entry{Seq: 7, ID: "op-closed", Type: "io.sandboxio.v1.op.closed", Source: "sandboxio/worker/w", Time: time.Now().UTC(),
		Subject: "sbx.ops.fake.s.closed", StreamSeq: 9, Record: rec, Sig: SigOK, Signer: "UABCDEFGHIJKLMNOPQRSTUVWXYZ", PrevHash: "ab", Hash: "cd"}
	var buf bytes.Buffer
	b.Run("encoder", func(b *testing.B) {
		enc := json.NewEncoder(&buf)
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			_ = enc.Encode(e)
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			line, _ := appendLine(buf.AvailableBuffer(), &e)
			buf.Write(line)
		}
	})
}
