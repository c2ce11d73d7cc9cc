package proctree

import (
	"errors"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// proc is a process a walk found, pinned by a pidfd: a signal through it
// reaches that process or none (ESRCH once it exited, even if its pid was
// taken). fd is -1 where the kernel has no pidfds, or none could be opened
// for it (the caller out of file descriptors): then by pid, after a check
// that the pid still names a process with the walk's start time.
type proc struct {
	pid   int
	start uint64
	fd    int
}

// noPidfd is set once pidfd_open said the kernel has none.
var noPidfd atomic.Bool

// pidfdOpen is unix.PidfdOpen; a test takes it away to check the fallback.
var pidfdOpen = unix.PidfdOpen

// pin opens a pidfd to the process f names and keeps it only if the
// process with that pid still has f's start time once the pidfd is open:
// then the pidfd refers to the process the walk found (a pid taken by a
// new process between the walk and the open shows a later start time).
// ok is false when the process is gone or is another one. A caller out of
// file descriptors (which the pinned members' pidfds may have used up)
// can neither open a pidfd nor read the stat: such a member is kept on the
// walk's word (it was there with that start time a moment ago), never
// taken as gone.
func pin(f found) (p *proc, ok bool) {
	p = &proc{pid: f.pid, start: f.start, fd: -1}
	if !noPidfd.Load() {
		fd, err := pidfdOpen(f.pid, 0)
		switch {
		case err == nil:
			p.fd = fd
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM):
			// ENOSYS: no pidfds here; EINVAL: a kernel that has the call
			// but not for this pid kind; EPERM: a seccomp filter.
			noPidfd.Store(true)
		case errors.Is(err, unix.ESRCH):
			return nil, false // gone already
		default:
			// EMFILE, ENFILE, ENOMEM: no descriptor for this one now. It
			// is not gone: it is signalled by pid (see signal).
		}
	}
	st, alive, known := readStatKnown(f.pid)
	if known && (!alive || st.start != f.start) {
		p.close()
		return nil, false
	}
	return p, true
}

// outOfDescriptors reports whether err says the caller has no file
// descriptor (or memory for one) to spare.
func outOfDescriptors(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOMEM)
}

// signal sends sig (0: none, a liveness check) to the pinned process.
// Without a pidfd it goes by pid, only while the pid names a process with
// the start time the walk saw (ESRCH otherwise), or when that cannot be
// read for want of a descriptor: what is left is the window between the
// check (or the walk) and the kill.
func (p *proc) signal(sig syscall.Signal) error {
	if p.fd >= 0 {
		return unix.PidfdSendSignal(p.fd, sig, nil, 0)
	}
	if st, alive, known := readStatKnown(p.pid); known && (!alive || st.start != p.start) {
		return unix.ESRCH
	}
	return syscall.Kill(p.pid, sig)
}

func (p *proc) close() {
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
}

// procs are the processes pinned by one kill, by pid.
type procs struct{ m map[int]*proc }

// pin pins the members of tree not pinned yet (or whose pid now names a
// process with another start time), sends each new one sig (0: none), and
// returns the new ones.
func (ps *procs) pin(tree []found, sig syscall.Signal) []*proc {
	if ps.m == nil {
		ps.m = map[int]*proc{}
	}
	var added []*proc
	for _, f := range tree {
		if old := ps.m[f.pid]; old != nil {
			if old.start == f.start {
				continue
			}
			old.close()
			delete(ps.m, f.pid)
		}
		p, ok := pin(f)
		if !ok {
			continue
		}
		ps.m[f.pid] = p
		added = append(added, p)
		if sig != 0 {
			_ = p.signal(sig)
		}
	}
	return added
}

func (ps *procs) close() {
	for _, p := range ps.m {
		p.close()
	}
}
