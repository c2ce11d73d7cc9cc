package proctree

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// bystander starts a process outside any tree, ended at cleanup.
func bystander(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

// TestStaleWalkIsNotSignalled: a process the walk found that exited, its
// pid taken by another process before the kill, is not signalled: the
// process now holding the pid (here a bystander, with a later start time
// than the one the walk saw) lives on. By pid, Kill and KillMarked killed
// it.
func TestStaleWalkIsNotSignalled(t *testing.T) {
	for _, name := range []string{"Kill", "KillMarked"} {
		t.Run(name, func(t *testing.T) {
			b := bystander(t)
			st, ok := readStat(b.Process.Pid)
			if !ok || st.start == 0 {
				t.Fatalf("bystander's stat: %+v %t", st, ok)
			}
			stale := []found{{pid: b.Process.Pid, start: st.start - 1}}
			walkTree = func(int, string, Scope) []found { return stale }
			t.Cleanup(func() { walkTree = walk })
			if name == "Kill" {
				Kill(b.Process.Pid, "", Scope{})
			} else if n := KillMarked("m", Scope{}); n != 0 {
				t.Errorf("KillMarked counted %d killed", n)
			}
			if err := syscall.Kill(b.Process.Pid, 0); err != nil {
				t.Fatalf("the process that took the pid was signalled: %v", err)
			}
			if st2, ok := readStat(b.Process.Pid); !ok || st2.start != st.start {
				t.Fatalf("the bystander is gone: %+v %t", st2, ok)
			}
		})
	}
}

// TestPidfdOfReapedProcess: a pinned process that exited and was reaped is
// not signalled through its pidfd (ESRCH), whatever holds its pid now.
func TestPidfdOfReapedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, ok := readStat(cmd.Process.Pid)
	if !ok {
		t.Fatal("no stat")
	}
	p, ok := pin(found{pid: cmd.Process.Pid, start: st.start})
	if !ok {
		t.Fatal("not pinned")
	}
	defer p.close()
	if p.fd < 0 {
		t.Skip("this kernel has no pidfds: signals go by pid")
	}
	if err := p.signal(0); err != nil {
		t.Fatalf("live process: %v", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its pid is free for another process
	if err := p.signal(syscall.SIGKILL); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("signal to a reaped process's pidfd: %v, want ESRCH", err)
	}
}

// TestKillWithoutPidfds: where the kernel has no pidfd_open, Kill still
// kills the tree, by pid.
func TestKillWithoutPidfds(t *testing.T) {
	pidfdOpen = func(int, int) (int, error) { return -1, unix.ENOSYS }
	t.Cleanup(func() { pidfdOpen = unix.PidfdOpen; noPidfd.Store(false) })
	mark := "proctree-nopidfd-" + strconv.Itoa(os.Getpid())
	leader, kids := start(t, mark)
	Kill(leader, mark, Scope{})
	if !noPidfd.Load() {
		t.Error("ENOSYS did not turn pidfds off")
	}
	for _, p := range append([]int{leader}, kids...) {
		poll.Eventually(t, 5*time.Second, func() error {
			if alive(p) {
				return os.ErrExist
			}
			return nil
		})
	}
}
