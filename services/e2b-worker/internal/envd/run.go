package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// RunOptions configures Run and Attach.
type RunOptions struct {
	// Argv, when set, is executed directly instead of "/bin/bash -l -c cmd".
	Argv []string
	Envs map[string]string
	Cwd  string
	Tag  string
	// Stdin keeps the process's stdin open for SendInput/CloseStdin (sent as
	// StartRequest.stdin); false gives the process an empty stdin.
	Stdin bool
	// Stdout and Stderr receive the output as it arrives (nil discards).
	Stdout io.Writer
	Stderr io.Writer
	// Timeout, when positive, asks envd to kill the process at the deadline
	// (sent as Connect-Timeout-Ms). The caller's ctx deadline is never sent.
	Timeout time.Duration
	// StallTimeout is how long the stream may be silent (no data, no
	// keepalive) before it counts as stalled. Default: the client's
	// KeepaliveInterval + StallGrace.
	StallTimeout time.Duration
	// OnStart is called with the PID once the start event arrives.
	OnStart func(pid uint32)
	// PTY starts the process on a terminal of this size; its output comes
	// to Stdout.
	PTY *PTYSize
}

// RunResult is the outcome of Run or Attach.
type RunResult struct {
	PID uint32
	// Exit is nil when the process did not finish (see the error).
	Exit *Exit
}

// ExitCode returns the exit code (-1 if killed or unknown).
func (r *RunResult) ExitCode() int {
	if r == nil || r.Exit == nil {
		return -1
	}
	return r.Exit.ExitCode
}

// Run starts cmd (through "/bin/bash -l -c" as the SDKs do, or Argv), streams
// its output to the writers and returns its exit status. A non-zero exit is
// not an error. Errors:
//   - the stream ended without an end event, failed, or stalled longer than
//     StallTimeout: ErrSandboxGone when /health answers 502 or is unreachable,
//     otherwise ErrStreamBroken (re-attach with Attach using res.PID);
//   - envd killed the process at opts.Timeout: ErrDeadlineExceeded;
//   - ctx ended: ctx.Err().
//
// res is non-nil whenever the start event arrived, so res.PID is available
// for re-attaching even on error.
func (c *Client) Run(ctx context.Context, cmd string, opts RunOptions) (*RunResult, error) {
	sr := StartRequest{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: opts.Envs, Cwd: opts.Cwd, Tag: opts.Tag, Stdin: opts.Stdin, Timeout: opts.Timeout,
		PTY: opts.PTY}
	if len(opts.Argv) > 0 {
		sr.Cmd, sr.Args = opts.Argv[0], opts.Argv[1:]
	}
	s, err := c.Start(ctx, sr)
	if err != nil {
		return nil, err
	}
	return c.follow(ctx, "run", s, opts)
}

// Attach re-attaches to a process with Connect and follows it like Run. Only
// output produced after the re-attach is delivered.
func (c *Client) Attach(ctx context.Context, sel Selector, opts RunOptions) (*RunResult, error) {
	s, err := c.Connect(ctx, sel)
	if err != nil {
		return nil, err
	}
	return c.follow(ctx, "attach", s, opts)
}

type recvResult struct {
	ev  Event
	err error
}

func (c *Client) follow(ctx context.Context, op string, s *Stream, opts RunOptions) (*RunResult, error) {
	defer s.Close()
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = c.cfg.KeepaliveInterval + c.cfg.StallGrace
	}
	events := make(chan recvResult, 16)
	done := make(chan struct{})
	finished := make(chan struct{})
	defer func() { close(done); s.cancel(); <-finished }()
	go func() {
		defer close(finished)
		for {
			ev, err := s.Recv()
			select {
			case events <- recvResult{ev, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var res *RunResult
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("envd %s: %w", op, ctx.Err())
		case <-timer.C:
			c.log.DebugContext(ctx, "envd stream stalled", slog.String("op", op), slog.Duration("stall_timeout", stall))
			return res, c.broken(ctx, op, fmt.Errorf("no event for %s", stall))
		case r := <-events:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(stall)
			if r.err != nil {
				if res != nil && res.Exit != nil {
					return res, nil // end event seen; trailer problems do not matter
				}
				if errors.Is(r.err, io.EOF) {
					return res, c.broken(ctx, op, errNoEnd)
				}
				if ctx.Err() != nil {
					return res, fmt.Errorf("envd %s: %w", op, ctx.Err())
				}
				if errors.Is(r.err, ErrDeadlineExceeded) || errors.Is(r.err, ErrNotFound) ||
					errors.Is(r.err, ErrInvalidArgument) || errors.Is(r.err, ErrUnauthenticated) {
					return res, r.err
				}
				return res, c.broken(ctx, op, r.err)
			}
			switch r.ev.Type {
			case EventStart:
				res = &RunResult{PID: r.ev.PID}
				if opts.OnStart != nil {
					opts.OnStart(r.ev.PID)
				}
			case EventStdout, EventPTY:
				if err := write(opts.Stdout, r.ev.Data); err != nil {
					return res, fmt.Errorf("envd %s: write stdout: %w", op, err)
				}
			case EventStderr:
				if err := write(opts.Stderr, r.ev.Data); err != nil {
					return res, fmt.Errorf("envd %s: write stderr: %w", op, err)
				}
			case EventEnd:
				if res == nil {
					res = &RunResult{}
				}
				res.Exit = r.ev.Exit
			}
		}
	}
}

func write(w io.Writer, b []byte) error {
	if w == nil {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// broken classifies a stream failure by probing /health.
func (c *Client) broken(ctx context.Context, op string, cause error) error {
	herr := c.Health(context.WithoutCancel(ctx))
	if errors.Is(herr, ErrSandboxGone) {
		return fmt.Errorf("envd %s: %w: %w", op, ErrSandboxGone, cause)
	}
	return fmt.Errorf("envd %s: %w: %w", op, ErrStreamBroken, cause)
}
