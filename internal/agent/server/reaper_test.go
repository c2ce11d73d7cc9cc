package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// TestReaperPaths: a started process's status arrives through its pidfd
// and, where there is none (pidfd_open refused, as on an old kernel or a
// runtime without it), through the SIGCHLD sweep alone; each gets its own
// status, and a process gets the timer slack it was started with.
func TestReaperPaths(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	r, err := startReaper()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pidfd  bool
		slack  int
		script string
		want   int
	}{
		{"pidfd", true, 0, "exit 7", 7},
		{"sweep", false, 0, "exit 9", 9},
		{"pidfd, slack", true, 123456, `exit $(( $(cat /proc/self/timerslack_ns) == 123456 ? 5 : 1 ))`, 5},
		{"sweep, slack", false, 234567, `exit $(( $(cat /proc/self/timerslack_ns) == 234567 ? 6 : 1 ))`, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.pidfd {
				pidfdOpen = func(int, int) (int, error) { return -1, unix.ENOSYS }
				defer func() { pidfdOpen = unix.PidfdOpen }()
			}
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer devnull.Close()
			fds := openFDs(t)
			var chans []<-chan exitInfo
			for range 20 {
				_, ch, err := r.start(sh, []string{"sh", "-c", tc.script}, &os.ProcAttr{Files: []*os.File{devnull, devnull, devnull}}, tc.slack)
				if err != nil {
					t.Fatal(err)
				}
				chans = append(chans, ch)
			}
			for i, ch := range chans {
				select {
				case ex := <-ch:
					if !ex.ws.Exited() || ex.ws.ExitStatus() != tc.want {
						t.Fatalf("process %d: status %v, want exit %d", i, ex.ws, tc.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("process %d: no status", i)
				}
			}
			// Every pidfd is closed once its process is reaped, by
			// whichever path reaped it.
			err = poll.Until(context.Background(), 10*time.Second, func() error {
				if n := openFDs(t); n > fds {
					return fmt.Errorf("%d descriptors open, %d before", n, fds)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(es)
}
