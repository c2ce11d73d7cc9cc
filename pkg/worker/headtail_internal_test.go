package worker

import (
	"bytes"
	"testing"
)

// TestCappedBufferKeepsTail: with keepTail a buffer keeps the first half of
// its limit and the real last bytes, however they were split into writes,
// and says where it dropped bytes.
func TestCappedBufferKeepsTail(t *testing.T) {
	out := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 1000)
	for _, tc := range []struct {
		name        string
		limit, n    int
		chunk       int
		wantCut     int64
		wantTrunc   bool
		wantHeadLen int
	}{
		{"fits", 100, 100, 7, 0, false, 50},
		{"one byte over", 100, 101, 7, 50, true, 50},
		{"long, small writes", 100, 30000, 3, 50, true, 50},
		{"long, one write", 100, 30000, 30000, 50, true, 50},
		{"long, writes larger than the ring", 100, 30000, 333, 50, true, 50},
		{"odd limit", 101, 5000, 64, 50, true, 50},
		{"short", 100, 10, 4, 0, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cappedBuffer{limit: int64(tc.limit), keepTail: true}
			src := out[:tc.n]
			for p := src; len(p) > 0; {
				k := min(tc.chunk, len(p))
				if n, err := c.Write(p[:k]); n != k || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				p = p[k:]
			}
			data, cut := c.output()
			if cut != tc.wantCut || c.truncated != tc.wantTrunc || c.total != int64(tc.n) {
				t.Fatalf("cut %d truncated %v total %d, want %d %v %d", cut, c.truncated, c.total, tc.wantCut, tc.wantTrunc, tc.n)
			}
			if tc.n <= tc.limit {
				if !bytes.Equal(data, src) {
					t.Fatalf("kept %q, want all of %q", data, src)
				}
				return
			}
			head, tail := data[:tc.wantHeadLen], data[tc.wantHeadLen:]
			if !bytes.Equal(head, src[:tc.wantHeadLen]) || !bytes.Equal(tail, src[len(src)-len(tail):]) || len(data) != tc.limit {
				t.Fatalf("kept head %q tail %q (%d bytes), want the first %d and the last %d of the output",
					head, tail, len(data), tc.wantHeadLen, tc.limit-tc.wantHeadLen)
			}
		})
	}
}
