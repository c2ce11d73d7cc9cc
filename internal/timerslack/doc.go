// Package timerslack gives a Go process's threads, the runtime's monitor
// thread (sysmon) among them, a timer slack of Relaxed, and the processes it
// starts the slack it was started with (ADR 28).
//
// The runtime's monitor sleeps 20 µs at a time for at least a millisecond
// after any system call that finds it asleep, so a process that makes a
// system call every few milliseconds keeps it waking thousands of times a
// second; on a virtual machine, where waking a thread is dear, that was most
// of a sandbox agent's context switches and a tenth of the host's CPU under
// load. With slack the kernel may end such a sleep up to the slack later,
// together with other timers. The monitor is started before any of the
// program's code runs, and a thread's slack is its creator's when it is
// created, so Relax sets the first thread's and executes the program again.
package timerslack
