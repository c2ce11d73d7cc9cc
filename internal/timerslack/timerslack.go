package timerslack

import (
	"os"
	"runtime"
	"strconv"
	"strings"
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
// re-execution, and the process's pid, which tells the second run that it
// has been done: "ORIGINAL_NS:PID".
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
		origS, pidS, _ := strings.Cut(v, ":")
		if pidS != strconv.Itoa(os.Getpid()) {
			return 0 // not this process's marker (a user's variable): left alone
		}
		_ = os.Unsetenv(Env) // not passed on to what the process starts
		n, err := strconv.Atoi(origS)
		cur, cerr := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
		if err != nil || n <= 0 || n >= int(Relaxed) || cerr != nil || cur != int(Relaxed) {
			return 0 // the slack did not survive execve here
		}
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
	// after the file it executes (ps, pgrep). The pid, which execve keeps,
	// tells the second run's marker from a variable of the same name that
	// came with the environment.
	mark := Env + "=" + strconv.Itoa(orig) + ":" + strconv.Itoa(os.Getpid())
	_ = syscall.Exec(exe, os.Args, append(os.Environ(), mark)) // returns only on failure
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(orig), 0, 0, 0)
	return 0
}

// Original is the slack the process was started with if Relax relaxed it,
// else 0.
func Original() int { return int(original.Load()) }

// Start runs start, which starts a process (exec.Cmd.Start, for one), so
// that the process gets the slack this process was started with, where
// Relax relaxed it, not Relaxed.
func Start(start func() error) error { return StartWith(Original(), start) }

// StartWith runs start, which starts a process, on a thread whose slack is
// ns while it runs, so that the process gets ns (a child's slack is its
// parent thread's); the thread gets its own back after. ns <= 0 runs start
// as it is.
func StartWith(ns int, start func() error) error {
	if ns <= 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || prev == ns {
		return start()
	}
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0)
	// Back before the thread is unlocked: threads the runtime creates take
	// their slack from the one that creates them.
	defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(prev), 0, 0, 0) }()
	return start()
}
