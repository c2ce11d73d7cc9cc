package worker

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Backend is what a sandbox backend implements. The runtime (Worker) owns
// everything else: the bus, the registry, leases, output streaming, timeouts,
// records. A backend is called concurrently for different sandboxes and for
// different processes of one sandbox.
//
// Errors: return an *events.Error (or wrap one with %w) to choose the SBX
// code, e.g. events.ErrImageNotFound, events.ErrExecFailed,
// events.ErrCapabilityNotSupported, events.ErrSandboxGone. Anything else is
// reported as SBX_E1603 BackendError.
type Backend interface {
	// Info describes the backend; it must not change while the worker runs.
	Info() Info
	// Create makes a sandbox ready for Exec before it returns. It is bounded
	// by ctx (the create timeout). If it fails it must leave nothing behind.
	Create(ctx context.Context, spec CreateSpec) (Created, error)
	// Exec runs one process to completion. When ctx is done (timeout, kill,
	// client gone) the backend must kill the process and return promptly;
	// the runtime then reports the timeout or cancellation itself. Output is
	// written to p.Stdout and p.Stderr as it comes; a Write may block
	// (backpressure) and the backend must let it.
	Exec(ctx context.Context, sandboxID string, p Process) (ExitStatus, error)
	// Kill removes the sandbox and everything it holds, and returns only once
	// it is gone. Killing a sandbox that does not exist returns nil.
	Kill(ctx context.Context, sandboxID string) error
}

// Info describes a backend.
type Info struct {
	// Name is the backend's id on the bus (docker, e2b, fake); ValidID.
	Name         string
	Isolation    events.IsolationTier
	Capabilities events.Capabilities
}

// CreateSpec is everything a backend needs to create one sandbox.
type CreateSpec struct {
	SandboxID string
	WorkerID  string
	Owner     string
	Spec      events.ClassSpec
	Env       map[string]string
	// Secrets are environment variables whose values must never appear in a
	// record, a label, a log line or an error message.
	Secrets   map[string]string
	Network   events.NetworkPolicy
	Resources events.Resources
	Metadata  map[string]string
	Deadline  time.Time
}

// Created is what Create returns.
type Created struct {
	// Image is what the sandbox runs (an image, a template), for records.
	Image    string
	Warnings []string
	// Network is the network policy in effect, normalised, for the
	// sandbox's record; nil means the requested one.
	Network *events.NetworkPolicy
	// ExecPath and ExecPathNote go into the record (events.Sandbox).
	ExecPath     string
	ExecPathNote string
}

// Process is one process to run in a sandbox.
type Process struct {
	ID  string
	Cmd []string
	Env map[string]string
	Cwd string
	// Stdin is nil when the process gets no input (stdin closed at once).
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTY asks for a pseudo-terminal of Rows x Cols (0: 24x80): stderr is
	// merged into stdout. Backends without PTYs ignore it.
	TTY        bool
	Rows, Cols int
}

// Reattacher is a Backend whose processes outlive their worker (the Docker
// backend's in-sandbox agent keeps them: ADR 18). A worker restarted with the
// same id re-attaches to the processes its predecessor left running instead
// of ending them with SBX_E1621 ProcessLost.
type Reattacher interface {
	// Reattach streams the rest of a process's output, from the byte
	// offsets already stored, and returns its exit status as Exec does
	// (ctx done kills it). An error wrapping ErrNotReattachable, returned
	// before any output, says the process or that output is gone.
	Reattach(ctx context.Context, sandboxID string, p ReattachProcess) (ExitStatus, error)
	// Abandon kills a process of the predecessor's that is ended as lost
	// instead (its output is gone, or it is a run_code): nobody can see
	// its output or status any more.
	Abandon(ctx context.Context, sandboxID, processID string) error
}

// ReattachProcess is a process a worker's predecessor started.
type ReattachProcess struct {
	ID string
	// StdoutFrom and StderrFrom are how many bytes of each stream are
	// stored (their last chunk's Sbx-Offset).
	StdoutFrom, StderrFrom int64
	Stdout, Stderr         io.Writer
	// Stdin is the process's input from here on, nil when its stdin was not
	// kept open (the request's keep_stdin_open); TTY says it runs on a
	// terminal (resize reaches it).
	Stdin io.Reader
	TTY   bool
}

// ErrNotReattachable is wrapped by a Reattacher's error for a process it
// cannot re-attach (gone, or its output from the stored offsets lost).
var ErrNotReattachable = errors.New("worker: the process cannot be re-attached")

// FileWatcher is a Backend that serves files.watch: it waits for changes in
// a directory of the sandbox as the sandbox user (events.FilesWatchRequest).
type FileWatcher interface {
	WatchFiles(ctx context.Context, sandboxID string, r events.FilesWatchRequest) (events.FilesWatchReply, error)
}

// Resizer changes the window size of a running process's PTY.
type Resizer interface {
	Resize(ctx context.Context, sandboxID, processID string, rows, cols int) error
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code      int
	OOMKilled bool
	// Signal names the signal that ended it ("KILL", "TERM"...), if any.
	Signal string
}

// Optional abilities. The runtime checks for them with a type assertion and
// answers CapabilityNotSupported when the backend lacks one.

// Signaller delivers a signal other than KILL to a running process. (KILL is
// done by the runtime by cancelling Exec's context.)
type Signaller interface {
	Signal(ctx context.Context, sandboxID, processID, signal string) error
}

// FileSystem reads and writes files inside a sandbox. Paths are resolved in
// the sandbox's filesystem; a path that escapes it (through .. or a symlink)
// must be refused with events.ErrInvalidValue or ErrForbidden.
type FileSystem interface {
	WriteFile(ctx context.Context, sandboxID, path string, mode uint32, r io.Reader, size int64) error
	// ReadFile streams a file's content to w and returns its size.
	ReadFile(ctx context.Context, sandboxID, path string, w io.Writer) (int64, error)
	ListFiles(ctx context.Context, sandboxID, path string) ([]events.FileInfo, error)
}

// CodeRunner runs code in a language interpreter inside the sandbox.
type CodeRunner interface {
	RunCode(ctx context.Context, sandboxID string, req CodeRequest) (CodeResult, error)
}

// CodeRequest is one run_code.
type CodeRequest struct {
	ProcessID string
	Language  string
	Code      string
	ContextID string
	Stdout    io.Writer
	Stderr    io.Writer
}

// CodeResult is what RunCode returns.
type CodeResult struct {
	ExitStatus
	Results []events.RichResult
	Error   *events.CodeError
}

// TimeoutSetter is for backends that hold a lifetime of their own (E2B) and
// must follow set_timeout.
type TimeoutSetter interface {
	SetTimeout(ctx context.Context, sandboxID string, deadline time.Time) error
}

// RuntimeTiers is for backends that offer several runtimes with different
// isolation (Docker with runc and runsc): the tier of each runtime a class
// may name in ClassSpec.Runtime. The runtime advertises them in the lease.
type RuntimeTiers interface {
	RuntimeTiers() map[string]events.IsolationTier
}

// ExecPather is for backends with more than one way to run an exec (Docker:
// through its in-sandbox agent or a docker exec): the way new sandboxes
// get now, advertised in the lease (WorkerLease.ExecPath).
type ExecPather interface {
	ExecPath() string
}

// SecretKeeper is for backends that can give back the secret values of a
// sandbox after a worker restart, so that the runtime keeps redacting them
// from the records of a re-adopted sandbox.
type SecretKeeper interface {
	// SecretValues returns the values and whether they are known.
	SecretValues(ctx context.Context, sandboxID string) ([]string, bool)
}

// Lister finds the sandboxes the backend holds for a worker, for
// reconciliation at start-up and by the reaper.
type Lister interface {
	ListSandboxes(ctx context.Context) ([]Listed, error)
}

// HostLister lists the sandboxes of every worker that shares this backend's
// host (Docker: every labelled container on the daemon). The runtime
// removes those whose worker has no lease and whose record in this
// deployment's registry has ended (the reaper marks a lost worker's
// sandboxes lost): a worker that crashed and came back under a new id
// leaves nothing running, and another deployment's containers on a shared
// daemon (no record here) are never touched.
type HostLister interface {
	ListHostSandboxes(ctx context.Context) ([]Listed, error)
}

// Listed is one sandbox found by a Lister.
type Listed struct {
	SandboxID string
	WorkerID  string
	CreatedAt time.Time
	Deadline  time.Time
}

// DeathWatcher is for backends that notice on their own that a sandbox died
// outside Kill (Docker: a container killed from outside, PID 1 killed by the
// OOM killer, a runsc crash). The runtime registers its handler before it
// takes commands and removes it (nil) when it stops; the backend calls it,
// from any goroutine and without holding its locks, with the sandbox id
// and a short reason for logs and the record. The runtime then fails the
// sandbox's running processes with SandboxGone, removes what is left and
// marks the sandbox gone in the registry.
type DeathWatcher interface {
	OnSandboxDeath(handler func(sandboxID, reason string))
}

// Janitor is for backends that sweep their host on their own for sandboxes
// past their deadline whatever else is lost (Docker: every container past
// its io.sandboxio.deadline label, of any worker or deployment). The
// runtime registers its handler (nil when it stops); the backend calls it
// after each removal, from its own goroutine and without holding its
// locks, so that the runtime records it as a "reap" operation and marks
// the sandbox gone in this deployment's registry, if it has a record there.
type Janitor interface {
	OnReap(handler func(Reaped))
}

// Reaped is one sandbox a backend's janitor removed.
type Reaped struct {
	SandboxID string
	WorkerID  string
	Deadline  time.Time
	Reason    string
}
