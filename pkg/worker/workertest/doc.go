// Package workertest is the conformance suite every sandbox backend must
// pass. It runs the backend behind the real worker runtime, router and Go
// client on an embedded JetStream server (pkg/sbxtest), so it checks the
// behaviour a user sees: lifecycle, exec semantics, streaming order, late
// attach, exit codes, timeouts, cancellation, kill idempotence, deadlines
// and errors; where the backend has them, stateful code contexts (one reply
// shape on every backend: stateful.go) and terminals (pty.go).
//
// A backend's test calls Run with the backend and a Commands value that
// says how to express the suite's probes in that backend (FakeCommands for
// the fake, ShellCommands for anything with a POSIX shell); RunProbes runs
// some of them (a second runtime of the same backend, such as gVisor).
package workertest
