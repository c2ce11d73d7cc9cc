package auditor

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sandboxio/sandboxio/internal/recordtest"
	"github.com/sandboxio/sandboxio/pkg/events"
)

var recordInputs = []string{
	`{"op_id":"01abc","kind":"exec","phase":"closed","sandbox_id":"01s","backend":"fake","worker":"01w","process_id":"p","owner":"t","started_at":"2026-12-01T12:00:00.123456789Z","ended_at":"2026-12-01T12:00:01+01:30","duration_ms":1000,"outcome":"error","error_code":"SBX_E1302","error":"é ran","exit_code":-1,"bytes_in":0,"bytes_out":9223372036854775807,"summary":{"cmd":"echo hi","class":"fake"},"metadata":{},"traceparent":"00-x"}`,
	` { "op_id" : "a" , "summary" : { "k" : "v" } } `,
	`{}`,
	`{"op_id":"a\"b"}`,                     // an escape: encoding/json
	`{"OP_ID":"a"}`,                        // case-insensitive key
	`{"op_id":"a","op_id":"b"}`,            // repeated key
	`{"unknown":[1,{"x":null}]}`,           // unknown key
	`{"op_id":null}`,                       // null
	`{"duration_ms":1.5}`,                  // a fraction: an error
	`{"duration_ms":1e3}`,                  // an exponent: an error
	`{"duration_ms":01}`,                   // not JSON
	`{"duration_ms":99999999999999999999}`, // overflow: an error
	`{"exit_code":"3"}`,                    // a string: an error
	`{"started_at":"yesterday"}`,           // not a time: an error
	`{"summary":{"a":"1","a":"2"}}`,        // repeated map key
	`{"summary":{"a":1}}`,                  // not a string: an error
	`{"op_id":"a"} x`,                      // trailing bytes
	`{"op_id":"a",}`,                       // trailing comma
	"{\"op_id\":\"\xff\"}",                 // invalid UTF-8: replaced
	"{\"op_id\":\"a\tb\"}",                 // a control character: not JSON
	`[]`, `null`, ``, `{"op_id":"a"`,
}

// TestUnmarshalRecordIsJSONUnmarshal: the record decoder gives what
// json.Unmarshal gives, error or record, and takes only valid JSON.
func TestUnmarshalRecordIsJSONUnmarshal(t *testing.T) {
	fast := 0
	for _, in := range recordInputs {
		if checkUnmarshalRecord(t, []byte(in)) {
			fast++
		}
	}
	if fast < 3 {
		t.Fatalf("the fast path took %d inputs, want the first three", fast)
	}
}

func checkUnmarshalRecord(t *testing.T, in []byte) (fast bool) {
	t.Helper()
	var want, got, direct events.OpRecord
	werr := json.Unmarshal(in, &want)
	gerr := unmarshalRecord(in, &got)
	d := recDecoder{in: in, s: string(in)}
	if fast = d.record(&direct); fast && !json.Valid(in) {
		t.Fatalf("%q: taken, but not JSON", in)
	}
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%q: error %v, encoding/json %v", in, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", in, got, want)
	}
	if fast && !reflect.DeepEqual(direct, want) {
		t.Fatalf("%q: fast path\n got %+v\nwant %+v", in, direct, want)
	}
	return fast
}

func FuzzUnmarshalRecord(f *testing.F) {
	for _, in := range recordInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkUnmarshalRecord(t, in) })
}

// TestUnmarshalRecordAllocations: a closed exec record decodes in a few
// allocations (one string for all its strings, the maps, the pointers,
// the zone); encoding/json took 30.
func TestUnmarshalRecordAllocations(t *testing.T) {
	in := []byte(recordInputs[0])
	var rec events.OpRecord
	if n := testing.AllocsPerRun(100, func() { _ = unmarshalRecord(in, &rec) }); n > 10 {
		t.Fatalf("%v allocations a record", n)
	}
}

// BenchmarkUnmarshalRecord: a closed exec record, by encoding/json and by
// hand.
func BenchmarkUnmarshalRecord(b *testing.B) {
	in := []byte(recordInputs[0])
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var rec events.OpRecord
			_ = json.Unmarshal(in, &rec)
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var rec events.OpRecord
			_ = unmarshalRecord(in, &rec)
		}
	})
}

// TestUnmarshalRecordKnowsEveryField: a record with every field of
// events.OpRecord set, as encoding/json writes it, is taken by the fast
// path and decoded as encoding/json decodes it: a field added to
// events.OpRecord without recDecoder learning it fails here (it would
// only be slow, left to encoding/json).
func TestUnmarshalRecordKnowsEveryField(t *testing.T) {
	rec, err := recordtest.FullRecord()
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var got events.OpRecord
	d := recDecoder{in: in, s: string(in)}
	if !d.record(&got) {
		t.Fatalf("the fast path refused %s", in)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("\n got %+v\nwant %+v", got, rec)
	}
}
