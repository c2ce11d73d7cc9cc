package proctree

import (
	"fmt"
	"os"
	"strconv"
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
