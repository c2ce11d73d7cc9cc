package timerslack

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Relaxed is the timer slack Relax gives every thread. What the runtime's
// monitor does on its wake-ups (taking back a processor stuck in a system
// call, preempting a goroutine that ran 10 ms, polling the network when no
// one has for 10 ms) can wait that much longer.
const Relaxed = 2 * time.Millisecond

// Env carries the slack the process was started with across Relax's
// re-execution (and tells the second run that it has been done).
const Env = "SBX_TIMERSLACK_NS"

// original is the slack the process was started with, once Relax has
// relaxed it; 0 otherwise.
var original atomic.Int64

// Relax makes every thread of the process run with Relaxed's timer slack,
// executing the program again (same path, arguments and environment, plus
// Env) the first time it is called, and returns the slack the process was
// started with. It returns 0, and the process runs on as it is, where that
// cannot be done (no prctl, no path to the executable) or the slack is
// already at least Relaxed. Call it before the program starts anything it
// would not want started twice.
func Relax() int {
	if v, ok := os.LookupEnv(Env); ok {
		n, err := strconv.Atoi(v)
		cur, cerr := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
		if err != nil || n <= 0 || n >= int(Relaxed) || cerr != nil || cur != int(Relaxed) {
			return 0 // Env came from elsewhere (a user's): left alone
		}
		_ = os.Unsetenv(Env) // not passed on to what the process starts
		original.Store(int64(n))
		return n
	}
	runtime.LockOSThread() // prctl and execve on one thread
	defer runtime.UnlockOSThread()
	orig, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || orig <= 0 || orig >= int(Relaxed) {
		return 0
	}
	exe, err := os.Executable()
	if err != nil {
		return 0
	}
	if unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(Relaxed), 0, 0, 0) != nil {
		return 0
	}
	// By its own path, not /proc/self/exe: the kernel names a process
	// after the file it executes (ps, pgrep).
	_ = syscall.Exec(exe, os.Args, append(os.Environ(), Env+"="+strconv.Itoa(orig))) // returns only on failure
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(orig), 0, 0, 0)
	return 0
}

// Original is the slack the process was started with if Relax relaxed it,
// else 0.
func Original() int { return int(original.Load()) }

// SetThread sets the calling thread's timer slack, which a process it
// starts inherits; ns <= 0 leaves it as it is. The caller keeps the
// goroutine on its thread (runtime.LockOSThread) until the process has
// started.
func SetThread(ns int) {
	if ns > 0 {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0)
	}
}

// Start runs start, which starts a process (exec.Cmd.Start, for one), on a
// thread with the slack the process was started with, where Relax relaxed
// it: the process gets that one, not Relaxed.
func Start(start func() error) error {
	ns := Original()
	if ns <= 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	SetThread(ns)
	return start()
}
