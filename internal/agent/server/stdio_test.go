package server

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPipeEnds: an exec's pipes give the agent a pollable end (read
// deadlines work: exitGrace's stop of a pump relies on them) and the child a
// blocking one, in both directions.
func TestPipeEnds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		childReads bool
	}{
		{name: "output", childReads: false},
		{name: "input", childReads: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine, theirs, err := pipe(tc.childReads)
			if err != nil {
				t.Fatal(err)
			}
			defer mine.Close()
			defer theirs.Close()
			for _, f := range []struct {
				f        *os.File
				nonblock bool
			}{{mine, true}, {theirs, false}} {
				fl, err := unix.FcntlInt(f.f.Fd(), unix.F_GETFL, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := fl&unix.O_NONBLOCK != 0; got != f.nonblock {
					t.Errorf("%s: non-blocking %t, want %t", f.f.Name(), got, f.nonblock)
				}
				readEnd := fl&unix.O_ACCMODE == unix.O_RDONLY
				if want := (f.f == theirs) == tc.childReads; readEnd != want {
					t.Errorf("%s: read end %t, want %t", f.f.Name(), readEnd, want)
				}
			}
			if !tc.childReads {
				_ = mine.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				if _, err := mine.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("read of the agent's end past its deadline: %v", err)
				}
			} else {
				_ = mine.SetWriteDeadline(time.Now().Add(-time.Second))
				if _, err := mine.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("write of the agent's end past its deadline: %v", err)
				}
			}
		})
	}
}
