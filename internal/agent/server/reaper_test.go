package server

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		})
	}
}
