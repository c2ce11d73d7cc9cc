package server

import (
	"bytes"
	"testing"
)

// TestOutlog: the log keeps at least the last retain bytes (at most a chunk
// more) at absolute offsets, and what it drops is freed.
func TestOutlog(t *testing.T) {
	const retain = 100 << 10
	var all []byte
	l := outlog{retain: retain}
	pattern := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + seed)
		}
		return b
	}
	for i, n := range []int{3, 7, 1, 70 << 10, 5, 130 << 10, 64 << 10, 1} {
		chunk := pattern(n, i)
		l.append(chunk)
		all = append(all, chunk...)
		kept := l.end - l.start()
		if l.end != int64(len(all)) || kept < min(int64(len(all)), retain) || kept > retain+logChunk || l.bytes() > retain+2*logChunk {
			t.Fatalf("after %d: end %d start %d (%d bytes held)", i, l.end, l.start(), l.bytes())
		}
		for from := l.start(); from <= l.end; from++ {
			if from%997 != 0 && from != l.end {
				continue // a sample of offsets
			}
			for _, n := range []int{1, 3, 70 << 10, retain} {
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
