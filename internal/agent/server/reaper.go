package server

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper reaps every child of the agent (it is a child subreaper, so
// orphaned grandchildren too) and hands the status of the processes it
// started to whoever waits for them. Its goroutine waits in a blocking
// wait4(-1): the kernel wakes it the moment a child exits, with no signal
// in between (a SIGCHLD reached it through the runtime's signal handler,
// the signal goroutine and a channel, two more hand-offs per exec).
//
// The goroutine is always in a system call: wait4, or, with no children,
// a read of the kick pipe that start writes to. Never parked on a channel,
// so that an agent with nothing else to do (its stdin ended, no child) is
// not taken by the runtime for a deadlock and killed, with its sandbox.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan exitInfo
	// idle: the loop found no child and is reading (or about to read) the
	// kick pipe; start then writes a byte to kickW.
	idle         atomic.Bool
	kickR, kickW int
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

var (
	reaperOnce sync.Once
	theReaper  *reaper
	reaperErr  error
)

// startReaper returns the process's one reaper: a second wait4(-1) loop
// would steal the statuses of the first one's children.
func startReaper() (*reaper, error) {
	reaperOnce.Do(func() { theReaper, reaperErr = newReaper() })
	return theReaper, reaperErr
}

func newReaper() (*reaper, error) {
	// Not fatal: without it orphans go to PID 1, which reaps them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// A full pipe already holds a wake-up: start never blocks on it.
	if err := unix.SetNonblock(p[1], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, os.NewSyscallError("fcntl", err)
	}
	r := &reaper{waiting: make(map[int]chan exitInfo), kickR: p[0], kickW: p[1]}
	go r.loop() // lives as long as the process
	return r, nil
}

// loop reaps children as they exit. With none left it waits for start: a
// process gains children (its own or orphans re-parented to it) only while
// it has one, or by starting one.
func (r *reaper) loop() {
	buf := make([]byte, 64)
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, 0, &ru)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil || pid <= 0: // ECHILD: no children
			r.idle.Store(true)
			// A process started before idle was set was not told to
			// write: look again, without waiting, before reading.
			if pid, err = syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru); err == syscall.ECHILD {
				for {
					if _, err := unix.Read(r.kickR, buf); err != unix.EINTR {
						break
					}
				}
			}
			r.idle.Store(false)
			if pid > 0 {
				r.deliver(pid, exitInfo{ws, ru})
			}
			continue
		}
		r.deliver(pid, exitInfo{ws, ru})
	}
}

// deliver hands pid's status to its waiter; an orphan has none. The lock
// is start's: a process that exits before start registered it waits here
// until it has.
func (r *reaper) deliver(pid int, ex exitInfo) {
	r.mu.Lock()
	ch := r.waiting[pid]
	delete(r.waiting, pid)
	r.mu.Unlock()
	if ch != nil {
		ch <- ex
	}
}

// start starts a process and registers it before the reaper can see it exit.
func (r *reaper) start(argv0 string, argv []string, attr *os.ProcAttr) (int, <-chan exitInfo, error) {
	r.mu.Lock()
	p, err := os.StartProcess(argv0, argv, attr)
	if err != nil {
		r.mu.Unlock()
		return 0, nil, err
	}
	pid := p.Pid
	_ = p.Release()
	ch := make(chan exitInfo, 1)
	r.waiting[pid] = ch
	r.mu.Unlock()
	if r.idle.Load() { // the loop found no child before this one
		_, _ = unix.Write(r.kickW, []byte{0})
	}
	return pid, ch, nil
}
