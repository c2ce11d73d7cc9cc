package server

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MonitorSlack is the timer slack every thread of a serving agent runs
// with (ADR 28). The Go runtime's monitor thread (sysmon) wakes every 20 µs
// for at least a millisecond after any system call that finds it asleep, so
// an agent that runs an exec every few milliseconds keeps it waking
// thousands of times a second: under load on this project's machines that
// was most of an agent's context switches and a tenth of the host's CPU.
// The kernel lets a sleep with slack end anywhere up to the slack later,
// with other timers, so the monitor wakes at most about every MonitorSlack.
// What it does on those wake-ups (taking back a P stuck in a system call,
// preempting a goroutine that ran 10 ms) can wait that long in an agent.
const MonitorSlack = 2 * time.Millisecond

// slackEnv carries the timer slack the agent was started with across its
// re-execution; the processes it starts get that one back.
const slackEnv = "SBX_AGENT_TIMERSLACK_NS"

// RelaxTimers gives every thread of the agent MonitorSlack's timer slack
// and returns the slack it was started with, for the processes it starts
// (Config.ChildTimerSlack). The runtime starts its monitor thread before any
// of the agent's code runs, and a thread's slack is set from its creator's
// when it is created: so the agent sets its own thread's and executes
// itself again, once (the slack is kept across execve, and slackEnv tells
// the second run it has been done). Where that cannot be done (no prctl,
// no path to itself), the agent runs on as it is and RelaxTimers returns 0.
func RelaxTimers() int {
	if v, ok := os.LookupEnv(slackEnv); ok {
		_ = os.Unsetenv(slackEnv) // not passed on to what the agent starts
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n < int(MonitorSlack) {
			return n
		}
		return 0
	}
	runtime.LockOSThread() // prctl and execve on one thread
	defer runtime.UnlockOSThread()
	orig, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || orig <= 0 || orig >= int(MonitorSlack) {
		return 0
	}
	if unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(MonitorSlack), 0, 0, 0) != nil {
		return 0
	}
	// By its own path, not /proc/self/exe: the kernel names a process
	// after the file it executes (ps, pgrep -x sbx-agent).
	if exe, err := os.Executable(); err == nil {
		env := append(os.Environ(), slackEnv+"="+strconv.Itoa(orig))
		_ = syscall.Exec(exe, os.Args, env) // returns only on failure
	}
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(orig), 0, 0, 0)
	return 0
}

// setThreadSlack sets the calling thread's timer slack, which a process it
// starts inherits; 0 leaves it as it is.
func setThreadSlack(ns int) {
	if ns > 0 {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0)
	}
}
