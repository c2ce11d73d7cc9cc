package client

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Sandbox is a handle on one sandbox: what create answered (the embedded
// CreateReply: id, backend, class, isolation, capabilities, deadline) and
// the calls that act on it. A handle for a sandbox created elsewhere comes
// from Client.Sandbox. Handles are safe for concurrent use; they hold no
// resources of their own (Kill removes the sandbox, nothing needs closing).
type Sandbox struct {
	events.CreateReply
	c *Client
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.SandboxID }

// Client is the client the handle calls through.
func (s *Sandbox) Client() *Client { return s.c }

// Sandbox returns a handle on an existing sandbox by id, without asking
// the server; calls on it fail with events.ErrSandboxNotFound (or
// events.ErrSandboxGone) if there is no such sandbox.
func (c *Client) Sandbox(id string) *Sandbox {
	return &Sandbox{CreateReply: events.CreateReply{SandboxID: id}, c: c}
}

// CreateOption adjusts a create request.
type CreateOption func(*createSettings)

type createSettings struct {
	lifetime time.Duration
	progress func(string)
}

// WithLifetime sets the sandbox's lifetime (rounded up to whole seconds,
// as the protocol counts them); it replaces the request's TimeoutS. After
// it the sandbox is removed whatever it is doing.
func WithLifetime(d time.Duration) CreateOption { return func(s *createSettings) { s.lifetime = d } }

// WithProgress passes the worker's progress messages (an image being
// pulled…) to f while the create runs.
func WithProgress(f func(msg string)) CreateOption { return func(s *createSettings) { s.progress = f } }

// seconds rounds d up to whole seconds, the protocol's unit for lifetimes.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// ExecOption adjusts an exec (Sandbox.Exec, Sandbox.Stream, Sandbox.Shell).
type ExecOption func(*events.ExecRequest)

// Timeout kills the process after d; events.ErrExecutionTimeout then
// carries what it wrote.
func Timeout(d time.Duration) ExecOption {
	return func(r *events.ExecRequest) { r.TimeoutMS = max(d.Milliseconds(), 0) }
}

// Cwd sets the working directory.
func Cwd(dir string) ExecOption { return func(r *events.ExecRequest) { r.Cwd = dir } }

// Env adds environment variables.
func Env(env map[string]string) ExecOption {
	return func(r *events.ExecRequest) {
		if r.Env == nil {
			r.Env = make(map[string]string, len(env))
		}
		for k, v := range env {
			r.Env[k] = v
		}
	}
}

// Stdin gives the process data on its standard input (then end of file,
// unless KeepStdinOpen).
func Stdin(data []byte) ExecOption {
	return func(r *events.ExecRequest) { r.Stdin, r.StdinEncoding = events.EncodeBytes(data) }
}

// KeepStdinOpen leaves a streamed process's stdin open for
// Process.WriteStdin and Process.CloseStdin (streamed execs only).
func KeepStdinOpen() ExecOption { return func(r *events.ExecRequest) { r.KeepStdinOpen = true } }

// OutputLimit caps each of stdout and stderr at n bytes.
func OutputLimit(n int64) ExecOption { return func(r *events.ExecRequest) { r.OutputLimit = n } }

// OutputTail makes a buffered exec keep, of a stream longer than its cap,
// the first half and the last half (its real end); the result's StdoutCut
// and StderrCut say where the bytes between were dropped.
func OutputTail() ExecOption { return func(r *events.ExecRequest) { r.OutputTail = true } }

// ProcessID names the process (a valid id), so that it can be signalled or
// attached to before the call returns.
func ProcessID(id string) ExecOption { return func(r *events.ExecRequest) { r.ProcessID = id } }

func (s *Sandbox) execRequest(argv []string, opts []ExecOption) events.ExecRequest {
	req := events.ExecRequest{SandboxID: s.SandboxID, Cmd: argv}
	for _, o := range opts {
		o(&req)
	}
	return req
}

// Exec runs argv to completion and returns its buffered output (up to the
// buffered cap; Truncated says when more was written). A non-zero exit is
// a result, not an error. A timeout is events.ErrExecutionTimeout, returned
// with the partial result. See Client.Exec for how a cancelled ctx ends the
// remote process.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ...ExecOption) (*events.ExecResult, error) {
	return s.c.Exec(ctx, s.execRequest(argv, opts))
}

// Shell runs script with sh -c, as Exec.
func (s *Sandbox) Shell(ctx context.Context, script string, opts ...ExecOption) (*events.ExecResult, error) {
	return s.Exec(ctx, []string{"sh", "-c", script}, opts...)
}

// Stream starts argv with its output streamed as it is written: iterate
// Process.Chunks, then Process.Wait. Closing the process before it exits
// kills it.
func (s *Sandbox) Stream(ctx context.Context, argv []string, opts ...ExecOption) (*Process, error) {
	return s.c.Stream(ctx, s.execRequest(argv, opts))
}

// Attach replays and follows the output of a streamed process of this
// sandbox from its start.
func (s *Sandbox) Attach(ctx context.Context, processID string) (*Process, error) {
	return s.c.Attach(ctx, s.SandboxID, processID)
}

// Signal sends a signal (TERM, INT, HUP, QUIT, USR1, USR2, KILL) to a
// process of this sandbox.
func (s *Sandbox) Signal(ctx context.Context, processID, signal string) error {
	return s.c.Signal(ctx, s.SandboxID, processID, signal)
}

// Code is one run_code.
type Code struct {
	// Language is the interpreter ("python" when empty).
	Language string
	Code     string
	// Context names an interpreter context: runs with the same context
	// share state (variables, imports) where the backend keeps state.
	Context string
	Timeout time.Duration
}

// RunCode runs code in the sandbox's interpreter and returns its output,
// its rich results (text, images…) and the exception it raised, if any (an
// exception is a result, not an error).
func (s *Sandbox) RunCode(ctx context.Context, code Code) (*events.RunCodeReply, error) {
	return s.c.RunCode(ctx, events.RunCodeRequest{SandboxID: s.SandboxID, Language: code.Language, Code: code.Code,
		ContextID: code.Context, TimeoutMS: max(code.Timeout.Milliseconds(), 0)})
}

// SetTimeout moves the sandbox's deadline to now + d and returns the new
// deadline (the handle's Deadline is what create answered; Info has the
// current one).
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) (time.Time, error) {
	return s.c.SetTimeout(ctx, s.SandboxID, d)
}

// Info asks the server for the sandbox's record (state, deadline, owner…).
func (s *Sandbox) Info(ctx context.Context) (*events.Sandbox, error) {
	return s.c.Get(ctx, s.SandboxID)
}

// Kill removes the sandbox and returns once it is gone; killing a sandbox
// that is already gone succeeds.
func (s *Sandbox) Kill(ctx context.Context) error {
	_, err := s.c.Kill(ctx, s.SandboxID)
	return err
}

// Files is the sandbox's file system.
func (s *Sandbox) Files() *Files { return &Files{sb: s} }

// WriteStdin sends data to the process's stdin (started with
// KeepStdinOpen).
func (p *Process) WriteStdin(ctx context.Context, data []byte) error {
	return p.c.SendStdin(ctx, p.SandboxID, p.ProcessID, data, false)
}

// CloseStdin ends the process's stdin (end of file).
func (p *Process) CloseStdin(ctx context.Context) error {
	return p.c.SendStdin(ctx, p.SandboxID, p.ProcessID, nil, true)
}

// Retryable reports whether err is an SBX error that the catalog says may
// succeed later unchanged (events.CatalogEntry.Retryable: no worker, quota,
// rate limit, overload, unreachable backend…), to retry with back-off.
func Retryable(err error) bool {
	var e *events.Error
	return errors.As(err, &e) && e.Retryable
}
