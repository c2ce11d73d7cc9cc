package dockerworker

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"
)

// TestParseListing: a no-agent listing comes from the sandbox; anything
// malformed fails it, names are taken byte for byte, and duplicates and
// entries over the bound are dropped.
func TestParseListing(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      []string // names, sorted; nil: an error
	}{
		{"empty", "", []string{}},
		{"plain", "81a4 5 1700000000 b\x0041ed 4096 1700000000 a\x00", []string{"a", "b"}},
		{"newline and spaces in names", "81a4 1 1 new\nline\x0081a4 1 1 sp ace \x00", []string{"new\nline", "sp ace "}},
		{"duplicate", "81a4 1 1 a\x0081a4 2 2 a\x00", []string{"a"}},
		{"no name", "81a4 1 1 \x00", nil},
		{"dot", "41ed 1 1 .\x00", nil},
		{"slash", "81a4 1 1 a/b\x00", nil},
		{"bad mode", "zz 1 1 a\x00", nil},
		{"negative size", "81a4 -1 1 a\x00", nil},
		{"mode too large", "1ffffffff 1 1 a\x00", nil},
		{"short record", "81a4 1\x00", nil},
		{"long name", "81a4 1 1 " + strings.Repeat("x", maxNameLen+1) + "\x00", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseListing([]byte(tc.raw), "/d")
			if tc.want == nil {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %+v %v, want %q", got, err, tc.want)
			}
			for i, f := range got {
				if f.Name != tc.want[i] || f.Path != "/d/"+tc.want[i] {
					t.Fatalf("entry %d: %+v, want %q", i, f, tc.want[i])
				}
			}
		})
	}
	got, _ := parseListing([]byte("a1ff 9 1 l\x0041ed 9 1 d\x0011b6 0 1 p\x00"), "/")
	if len(got) != 3 || fs.FileMode(got[0].Mode).Type() != fs.ModeDir || got[0].Size != 0 ||
		fs.FileMode(got[1].Mode).Type() != fs.ModeSymlink || fs.FileMode(got[2].Mode).Type() != fs.ModeNamedPipe || got[2].Path != "/p" {
		t.Fatalf("types: %+v", got)
	}
	var many strings.Builder
	for i := range 10005 {
		many.WriteString("81a4 1 1 f" + strconv.Itoa(i) + "\x00")
	}
	if got, err := parseListing([]byte(many.String()), "/"); err != nil || len(got) != 10000 {
		t.Fatalf("10,005 records: %d entries, %v; want 10000", len(got), err)
	}
}
