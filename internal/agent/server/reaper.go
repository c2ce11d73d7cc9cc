package server

import (
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper reaps every child of the agent (it is a child subreaper, so
// orphaned grandchildren too) and hands the status of the processes it
// started to whoever waits for them. Its goroutine waits in a blocking
// wait4(-1): the kernel wakes it the moment a child exits, with no signal
// in between (a SIGCHLD reached it through the runtime's signal handler,
// the signal goroutine and a channel, two more hand-offs per exec).
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan exitInfo
	// kick wakes the loop when it found no child and a process started.
	kick chan struct{}
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
)

// startReaper returns the process's one reaper: a second wait4(-1) loop
// would steal the statuses of the first one's children.
func startReaper() (*reaper, error) {
	reaperOnce.Do(func() { theReaper = newReaper() })
	return theReaper, nil
}

func newReaper() *reaper {
	// Not fatal: without it orphans go to PID 1, which reaps them.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	r := &reaper{waiting: make(map[int]chan exitInfo), kick: make(chan struct{}, 1)}
	go r.loop() // lives as long as the process
	return r
}

// loop reaps children as they exit. With none left it waits for start: a
// process gains children (its own or orphans re-parented to it) only while
// it has one, or by starting one.
func (r *reaper) loop() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, 0, &ru)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil || pid <= 0: // ECHILD: no children
			<-r.kick
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
	select { // the loop may have found no child before this one
	case r.kick <- struct{}{}:
	default:
	}
	return pid, ch, nil
}
