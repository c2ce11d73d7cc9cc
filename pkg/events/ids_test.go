package events

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"sbx-01", true},
		{"my_sandbox", true},
		{"01jdxk8v6m3n4p5q6r7s8t9v0w", true},
		{strings.Repeat("a", MaxIDLength), true},
		{"", false},
		{strings.Repeat("a", MaxIDLength+1), false},
		{"a.b", false},
		{"a*", false},
		{">", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"Abc", false},
		{"ABC", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
		{"a\x00", false},
		{"$SRV", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := make(map[string]bool)
	for i := 0; i < 10000; i++ {
		id := NewID()
		if !ValidID(id) {
			t.Fatalf("NewID() = %q is not a valid id", id)
		}
		if len(id) != 26 {
			t.Fatalf("NewID() = %q: length %d, want 26", id, len(id))
		}
		if seen[id] {
			t.Fatalf("NewID() returned %q twice", id)
		}
		seen[id] = true
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ids []string
	for i := 0; i < 200; i++ {
		// Strictly increasing milliseconds, including across the 32-bit boundary of the low word.
		ids = append(ids, newIDAt(base.Add(time.Duration(i*i)*time.Millisecond)))
	}
	ids = append(ids, newIDAt(time.UnixMilli(1<<32-1)), newIDAt(time.UnixMilli(1<<32)))
	if !slices.IsSorted(ids[:200]) {
		t.Errorf("ids made at increasing times do not sort: %v", ids[:5])
	}
	if ids[200] >= ids[201] {
		t.Errorf("id at 2^32-1 ms (%s) does not sort before the one at 2^32 ms (%s)", ids[200], ids[201])
	}
	// The first 10 characters are the timestamp: the same millisecond shares them.
	a, b := newIDAt(base), newIDAt(base)
	if a[:10] != b[:10] || a == b {
		t.Errorf("same-millisecond ids %s %s: want equal time prefix and different randomness", a, b)
	}
	// A time before the previous one sorts before it.
	if newIDAt(base.Add(-time.Millisecond)) >= a {
		t.Errorf("an earlier id does not sort first")
	}
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"", "a", "abc-def_0", "a.b", "a*", ">", "a b", "A", "\x00", "é", strings.Repeat("z", 65), "sbx.out.a.b.stdout"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidID(s) {
			return
		}
		if strings.ContainsAny(s, ".*>") || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
			t.Fatalf("ValidID accepted %q, which has a subject metacharacter or whitespace", s)
		}
		if len(s) == 0 || len(s) > MaxIDLength {
			t.Fatalf("ValidID accepted %q of length %d", s, len(s))
		}
		if strings.ToLower(s) != s {
			t.Fatalf("ValidID accepted upper case %q", s)
		}
		// It fits a subject token: the subject parses back to exactly it.
		tn, sb, proc, stream, ok := ParseOutputSubject(OutputSubject(s, s, s, Stdout))
		if !ok || tn != s || sb != s || proc != s || stream != Stdout {
			t.Fatalf("id %q does not survive as a subject token: %q %q %q %v", s, sb, proc, stream, ok)
		}
		if got := strings.Split(NodeSubject(s, s, Verb(OpExec)), "."); len(got) != 6 {
			t.Fatalf("id %q splits a node subject into %d tokens", s, len(got))
		}
	})
}
