package server

import (
	"bytes"
	"testing"
)

// TestOutlog: the log keeps the last retain bytes at absolute offsets,
// across the wrap of its ring, and never grows past retain.
func TestOutlog(t *testing.T) {
	const retain = 10
	var all []byte
	l := outlog{retain: retain}
	for i, chunk := range []string{"abc", "defghij", "k", "lmnopqrstuvwxyz", "0123456789ABCDEF", "G"} {
		l.append([]byte(chunk))
		all = append(all, chunk...)
		if l.end != int64(len(all)) || l.start() != max(0, int64(len(all))-retain) || cap(l.buf) > retain {
			t.Fatalf("after %d: end %d start %d cap %d", i, l.end, l.start(), cap(l.buf))
		}
		for from := l.start(); from <= l.end; from++ {
			for _, n := range []int{1, 3, retain} {
				got := l.read(from, make([]byte, n))
				want := all[from:min(int64(len(all)), from+int64(n))]
				if !bytes.Equal(got, want) {
					t.Fatalf("after %d: read(%d, %d) = %q, want %q", i, from, n, got, want)
				}
			}
		}
	}
}

// TestFinishedBudget: finished execs are forgotten oldest first past the
// count or the bytes of their logs, the newest always kept.
func TestFinishedBudget(t *testing.T) {
	var tb table
	big := make([]byte, 6<<20)
	var ps []*proc
	for i := 0; i < 5; i++ {
		p := newProc(string(rune('a'+i)), DefaultRetain)
		p.logs[0].append(big)
		tb.add(p)
		tb.finish(p)
		ps = append(ps, p)
	}
	// 6 MiB each against 16 MiB: the two newest stay.
	for i, p := range ps {
		kept := tb.get(p.mark) != nil
		if kept != (i >= 3) {
			t.Errorf("proc %d kept=%v", i, kept)
		}
	}
}
