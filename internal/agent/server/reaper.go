package server

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/timerslack"
)

// reaper reaps every child of the agent (it is a child subreaper, so
// orphaned grandchildren too) and hands the status of the processes it
// started to whoever waits for them. No goroutine of it ever sits in a
// blocking system call (ADR 28):
//   - each started process has a pidfd in the runtime's netpoller, which
//     wakes its waiter the moment the process exits;
//   - SIGCHLD sweeps every child that has exited with wait4(WNOHANG):
//     orphans, and any started process whose pidfd could not be had (a
//     kernel or a runtime such as gVisor's without pidfd_open).
//
// A goroutine blocked in wait4 keeps a P (the worker gives the agent one
// per CPU of the sandbox's limit, ADR 28) in a system call, so that nothing
// else runs on it until the runtime's monitor thread takes it back, and
// keeps that thread waking every 20 µs to do so: most of an agent's context
// switches and a tenth of the machine's CPU under load (docs/benchmarks.md).
//
// Whichever path reaps a process delivers its status, under mu: start
// starts and registers a process, and opens its pidfd, under the same
// lock, so one that exits at once is never reaped before it is registered,
// and its pid cannot be reused before its pidfd is open.
//
// The signal handler also keeps an agent with nothing to do (its stdin
// ended, no child) from looking like a deadlock to the runtime, which would
// kill it and the sandbox with it: a goroutine waiting for a signal is not
// asleep for good (TestServeOutlivesItsStdin).
type reaper struct {
	mu      sync.Mutex
	waiting map[int]*waiter
}

// waiter is a started process's registration: where its status goes, and
// its pidfd (nil: none), which the path that reaps it closes.
type waiter struct {
	ch    chan exitInfo
	pidfd *os.File
}

type exitInfo struct {
	ws syscall.WaitStatus
	ru syscall.Rusage
}

// ReserveThreads makes the Go runtime start n OS threads now and keep them
// idle: the agent shares the sandbox's pids limit, and a runtime that needs a
// thread when a fork bomb has taken every pid dies ("failed to create new OS
// thread"). With threads in reserve it keeps answering (and reports the
// failed forks).
func ReserveThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	for i := 0; i < n; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread() // the thread goes back to the idle pool
		}()
	}
	ready.Wait()
	release.Done()
	done.Wait()
}

// pidfdOpen is unix.PidfdOpen; a test takes it away to check the sweep
// alone.
var pidfdOpen = unix.PidfdOpen

var (
	reaperOnce sync.Once
	theReaper  *reaper
	reaperErr  error
)

// startReaper returns the process's one reaper: a second wait4(-1) sweep
// would steal the statuses of the first one's children.
func startReaper() (*reaper, error) {
	reaperOnce.Do(func() { theReaper, reaperErr = newReaper() })
	return theReaper, reaperErr
}

func newReaper() (*reaper, error) {
	// Not fatal: without it orphans go to PID 1, which reaps them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	r := &reaper{waiting: make(map[int]*waiter)}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go r.sweepOn(sigs) // lives as long as the process
	return r, nil
}

// sweepOn reaps whatever has exited each time a SIGCHLD arrives (signals
// coalesce: one sweep takes every child that has exited by then).
func (r *reaper) sweepOn(sigs <-chan os.Signal) {
	for range sigs {
		r.sweep()
	}
}

// sweep reaps every child that has exited, delivering the status of those
// start registered.
func (r *reaper) sweep() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		r.mu.Lock()
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			r.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 { // ECHILD, or none has exited
			r.mu.Unlock()
			return
		}
		w := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if w != nil {
			w.ch <- exitInfo{ws, ru}
			if w.pidfd != nil {
				// Wakes its waiter, which finds it delivered. Not under
				// mu: the waiter takes mu, and Close waits for it.
				_ = w.pidfd.Close()
			}
		}
	}
}

// start starts a process, with the timer slack slack (0: the starting
// thread's), and registers it before the reaper can see it exit.
func (r *reaper) start(argv0 string, argv []string, attr *os.ProcAttr, slack int) (int, <-chan exitInfo, error) {
	r.mu.Lock()
	var p *os.Process
	err := timerslack.StartWith(slack, func() (err error) {
		p, err = os.StartProcess(argv0, argv, attr)
		return err
	})
	if err != nil {
		r.mu.Unlock()
		return 0, nil, err
	}
	pid := p.Pid
	_ = p.Release()
	w := &waiter{ch: make(chan exitInfo, 1)}
	// Under mu the process is not reaped, so pid still names it.
	if fd, err := pidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		w.pidfd = os.NewFile(uintptr(fd), "pidfd")
	}
	r.waiting[pid] = w
	r.mu.Unlock()
	if w.pidfd != nil {
		go r.wait(w, pid)
	}
	return pid, w.ch, nil
}

// wait reaps pid once its pidfd says it has exited, unless a sweep did
// first (and closed the pidfd, which ends the wait).
func (r *reaper) wait(w *waiter, pid int) {
	defer w.pidfd.Close()
	rc, err := w.pidfd.SyscallConn()
	if err != nil {
		return // the sweep delivers it
	}
	_ = rc.Read(func(uintptr) bool {
		r.mu.Lock()
		if r.waiting[pid] != w { // reaped by a sweep
			r.mu.Unlock()
			return true
		}
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		for err == syscall.EINTR {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		}
		switch {
		case err == nil && got == 0:
			r.mu.Unlock()
			return false // not yet: wait for the pidfd
		case err != nil:
			r.mu.Unlock()
			return true // left to the sweep
		}
		delete(r.waiting, pid)
		r.mu.Unlock()
		w.ch <- exitInfo{ws, ru}
		return true
	})
}
