package dockerworker

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/proctree"
)

// hostSignalTree signals an exec's process tree from the host, when the
// daemon's pid namespace is the worker's (the worker runs as root on the
// daemon's host). It reports false when the pid is not visible here or is not
// in the container (a remote daemon, a worker in a container): the caller
// then signals from inside.
//
// An exec'd process is the leader of its own session and process group. A
// non-KILL signal goes to the group, as a terminal would send it. For KILL,
// the tree is every process of the container that is in the leader's session
// or group, descends from it, or carries its mark (EnvProcessID=id) in its
// environment (which catches daemonised children, reparented to init): the
// tree is frozen with SIGSTOP until no new member appears, then killed
// (internal/proctree, the agent's walk too).
func hostSignalTree(containerID string, pid int, sig syscall.Signal, mark string) bool {
	if pid <= 1 {
		return false
	}
	// A pidfd pins the process: checked to be in the container after it is
	// opened, a signal through it reaches that process or none, never one
	// that reused its pid (kernels before 5.3 have none: kill by pid).
	pf := openPidfd(pid)
	defer pf.close()
	if !inContainer(pid, containerID) {
		return false
	}
	if sig != syscall.SIGKILL {
		// The group first: its id cannot be reused while a member lives.
		if err := syscall.Kill(-pid, sig); err != nil && err != syscall.ESRCH {
			if err := pf.signal(pid, sig); err != nil && err != syscall.ESRCH {
				return false
			}
		}
		return true
	}
	// Without the right to signal the leader (a worker not running as root,
	// or as another uid than the sandbox's) nothing here would work: say
	// so, and let the caller kill from inside the container.
	if err := pf.signal(pid, 0); err == syscall.EPERM {
		return false
	}
	proctree.Kill(pid, mark, proctree.Scope{Keep: func(p int) bool { return inContainer(p, containerID) }})
	return true
}

// pidfd is a process's file descriptor, -1 where the kernel has none.
type pidfd int

func openPidfd(pid int) pidfd {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	return pidfd(fd)
}

// signal sends sig to the process the pidfd holds, or by pid without one.
func (p pidfd) signal(pid int, sig syscall.Signal) error {
	if p < 0 {
		return syscall.Kill(pid, sig)
	}
	return unix.PidfdSendSignal(int(p), sig, nil, 0)
}

func (p pidfd) close() {
	if p >= 0 {
		_ = unix.Close(int(p))
	}
}

func inContainer(pid int, containerID string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && containerID != "" && bytes.Contains(b, []byte(containerID))
}
