package proctree

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// TestKillWhenPidfdsRunOut: a pidfd_open that failed for want of a file
// descriptor (EMFILE: the caller's RLIMIT_NOFILE, ENFILE: the host's, or
// ENOMEM) took the member as gone, so a tree whose killer had run out of
// descriptors was left running. Such a member is pinned by pid and its
// start time instead, and killed.
func TestKillWhenPidfdsRunOut(t *testing.T) {
	for i, errno := range []unix.Errno{unix.EMFILE, unix.ENFILE, unix.ENOMEM} {
		for _, how := range []string{"Kill", "KillMarked"} {
			t.Run(how+"/"+errno.Error(), func(t *testing.T) {
				mark := "proctree-emfile-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i) + how
				leader, kids := start(t, mark)
				// Registered after start's cleanup, so run before it: the
				// cleanup kills with real pidfds whatever the outcome.
				pidfdOpen = func(int, int) (int, error) { return -1, errno }
				t.Cleanup(func() { pidfdOpen = unix.PidfdOpen; noPidfd.Store(false) })
				if how == "Kill" {
					Kill(leader, mark, Scope{})
				} else if n := KillMarked(mark, Scope{}); n < 3 {
					t.Errorf("KillMarked killed %d, want the 3", n)
				}
				if noPidfd.Load() {
					t.Errorf("%v turned pidfds off for good", errno)
				}
				for _, p := range append([]int{leader}, kids...) {
					poll.Eventually(t, 5*time.Second, func() error {
						if alive(p) {
							return fmt.Errorf("member %d is still alive", p)
						}
						return nil
					})
				}
			})
		}
	}
}

// TestKillWithFewDescriptors: a killer with one file descriptor to spare
// (RLIMIT_NOFILE lowered to what it has open and one more, in a
// subprocess) could walk /proc and open a member's pidfd, and then read no
// member's stat: every member was taken as gone and left running. Each is
// kept on the walk's word (through its pidfd, or by pid) and killed.
func TestKillWithFewDescriptors(t *testing.T) {
	if spec := os.Getenv("PROCTREE_FEW_FDS"); spec != "" {
		fewDescriptorsKill(spec) // in the subprocess: exits
	}
	mark := "proctree-fewfds-" + strconv.Itoa(os.Getpid())
	leader, kids := start(t, mark)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillWithFewDescriptors$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PROCTREE_FEW_FDS="+strconv.Itoa(leader)+" "+mark)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the killer: %v: %s", err, out)
	}
	t.Logf("the killer: %s", strings.TrimSpace(string(out)))
	for _, p := range append([]int{leader}, kids...) {
		poll.Eventually(t, 5*time.Second, func() error {
			if alive(p) {
				return fmt.Errorf("member %d is still alive", p)
			}
			return nil
		})
	}
}

// fewDescriptorsKill runs Kill of "LEADER MARK" with one file descriptor
// to spare, and exits.
func fewDescriptorsKill(spec string) {
	var leader int
	var mark string
	if _, err := fmt.Sscan(spec, &leader, &mark); err != nil {
		fmt.Println("spec:", err)
		os.Exit(2)
	}
	// What the runtime opens lazily on a first read (the poller) is open
	// before the count.
	_, _ = os.ReadFile("/proc/self/stat")
	_, _ = os.ReadDir("/proc")
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	open := uint64(len(fds) - 1) // less ReadDir's own
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = open + 1
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	Kill(leader, mark, Scope{})
	fmt.Printf("killed with RLIMIT_NOFILE %d (%d open)\n", lim.Cur, open)
	os.Exit(0)
}
