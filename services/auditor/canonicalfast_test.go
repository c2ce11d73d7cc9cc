package auditor

import (
	"bytes"
	"encoding/json"
	"testing"
)

var canonicalCorpus = []string{
	`null`, `true`, `false`, `0`, `-0`, `1.50`, `1e5`, `-1.2E-3`, `""`, `"a"`, ` {"b":1, "a" : [1, 2 ,{"z":null,"y":"x"}] } `,
	`{"op_id":"op1","kind":"exec","phase":"closed","summary":{"cmd":"echo hi","cwd":"/work"},"duration_ms":3,"exit_code":0}`,
	`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`, `{"":1}`, `{}`, `[]`, `[[]]`, `[{}]`, `{"a":{}}`,
	`"<script>&"`, `{"<":1,"&":2,">":3}`, `"\u003c"`, `"\/"`, `"\n\t\r\b\f"`, `"\u0000\u001f"`, "\"\x7f\"",
	`"\u2028\u2029"`, "\"\u2028\"", `"é"`, "\"é\"", "\"\xff\xfe\"", `"\ud800"`, `"\ud83d\ude00"`, `"\udc00\ud800"`,
	`{"é":1,"e":2,"\u00e9":3}`, `{"k\"q":1}`, `{"a\\b":1}`, "{\"\xff\":1}",
	// not valid: both answer an error
	``, ` `, `{`, `[1,]`, `{"a":}`, `{"a" 1}`, `01`, `1 2`, `{"a":1}x`, `"abc`, `nul`, `[1}`, `{"a":1,}`, `tru`, `-`, `.5`, `"\x"`,
}

// TestCanonicalFastIsExact: the fast canonical form is encoding/json's,
// byte for byte, and refuses what it refuses.
func TestCanonicalFastIsExact(t *testing.T) {
	for _, in := range canonicalCorpus {
		checkCanonical(t, []byte(in))
	}
}

func checkCanonical(t *testing.T, in []byte) {
	t.Helper()
	got, gerr := canonicalValue(in)
	want, werr := canonicalSlow(in)
	if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("canonical(%q) = %q, %v; encoding/json: %q, %v", in, got, gerr, want, werr)
	}
	// What decodeRecord uses once json.Unmarshal took the input.
	if json.Valid(in) {
		if got, err := canonicalOfValid(in); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("canonicalOfValid(%q) = %q, %v; encoding/json: %q", in, got, err, want)
		}
	}
}

func FuzzCanonicalFast(f *testing.F) {
	for _, in := range canonicalCorpus {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkCanonical(t, in) })
}

func BenchmarkCanonical(b *testing.B) {
	rec := []byte(canonicalCorpus[11])
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			_, _ = canonicalValue(rec)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_, _ = canonicalSlow(rec)
		}
	})
}
