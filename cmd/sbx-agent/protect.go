package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"golang.org/x/sys/unix"
)

// protect closes the agent to the code it serves (ADR 29). Everything in
// the sandbox runs as the agent's own uid, so by default it could open
// /proc/<agent>/mem for writing and rewrite the agent (or read its
// memory): a non-dumpable process's /proc files belong to root, and
// opening its memory needs CAP_SYS_PTRACE, which nothing in the sandbox
// has. An execve resets the flag, so the agent sets it itself, after any
// re-execution of its own (timerslack.Relax); the processes it starts are
// dumpable again from their execve on.
//
// As the container's PID 1 (a sandbox with the agent has no docker-init),
// it also keeps the signals the sandbox may send it from ending it: the
// kernel already drops SIGKILL and SIGSTOP sent to a PID 1 from inside its
// namespace, and a signal without a handler; Go has a handler for these,
// whose default is to exit or crash. They are received and dropped. Their
// handlers, not SIG_IGN, are reset to the default in the processes the
// agent starts.
func protect() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_DUMPABLE)", err)
	}
	if os.Getpid() == 1 {
		dropSignals()
	}
	return nil
}

// crashHook, set only in a build with the sbxagent_crashhook tag (tests),
// arms a way to crash the agent fatally.
var crashHook func()

// fatalSignals are the signals whose Go default, for one sent by a process,
// ends the program: SIGHUP, SIGINT and SIGTERM exit; the others crash.
var fatalSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT,
	syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE,
	syscall.SIGSEGV, syscall.SIGSTKFLT, syscall.SIGSYS}

// dropSignals receives fatalSignals and drops them, for as long as the
// agent runs. A fault of the agent's own (not a signal sent to it) still
// panics as it would.
func dropSignals() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, fatalSignals...)
	go func() {
		for range ch {
		}
	}()
}

// crashOutput makes a fatal crash of the agent (what no recover catches: a
// runtime fatal error, a panic outside a request's goroutine) write its
// report to the file at p as well as to stderr, before the agent, and with
// it the sandbox, ends with code 2. The agent's stderr reaches no log; the
// file is where the worker can read why (ADR 29).
func crashOutput(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("crash file: %w", err)
	}
	defer f.Close() // SetCrashOutput keeps its own descriptor
	return debug.SetCrashOutput(f, debug.CrashOptions{})
}
