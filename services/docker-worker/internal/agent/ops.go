package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// ExecRequest is one process to run through the agent.
type ExecRequest struct {
	Argv []string
	Env  []string // KEY=VALUE over the sandbox's start environment
	Cwd  string
	// Stdin is nil for no input (the process gets /dev/null).
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Timeout is the agent's own backstop; the caller's ctx is the bound
	// that counts.
	Timeout time.Duration
	// Mark is the process id, set as SBX_PROCESS_ID in its environment.
	Mark string
	// Started is called with a Signaller once the request is sent.
	Started func(Signaller)
	// TTY runs the process on a pseudo-terminal of Rows x Cols; Resizable
	// is called with the function that resizes it.
	TTY        bool
	Rows, Cols uint16
	Resizable  func(func(rows, cols uint16) error)
	// KillGrace bounds the wait for the exit status after ctx is done.
	KillGrace time.Duration
}

// Signaller sends signals to a running exec.
type Signaller func(sig int, group bool) error

// Exec runs a process and streams its output; a blocking Write of Stdout or
// Stderr holds the agent back (backpressure reaches the process's pipe). When
// ctx is done the agent kills the process tree and Exec returns ctx's error
// with the exit status, if it came within KillGrace.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (proto.Exit, error) {
	preq := proto.Request{Op: proto.OpExec, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, Stdin: req.Stdin != nil,
		Mark: req.Mark, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols}
	if req.Timeout > 0 {
		preq.TimeoutMS = max(1, req.Timeout.Milliseconds())
	}
	return c.runExec(ctx, preq, req)
}

// AttachRequest re-attaches to an exec an earlier connection (a worker
// that restarted) started with Mark.
type AttachRequest struct {
	Mark string
	// StdoutFrom and StderrFrom are the byte offsets of output already
	// stored: the agent sends what follows.
	StdoutFrom, StderrFrom int64
	Stdout, Stderr         io.Writer
	// Stdin, when not nil, goes on to the process's stdin (kept open by
	// the agent across the re-attach); its end closes it.
	Stdin     io.Reader
	Started   func(Signaller)
	Resizable func(func(rows, cols uint16) error)
	KillGrace time.Duration
}

// ErrLost: the agent does not have the process (it never ran it, or forgot
// it), or no longer keeps its output from the offsets asked for.
var ErrLost = errors.New("agent: process or its output is lost")

// Attach re-attaches to a running (or finished, not yet collected) exec and
// streams its output from the offsets given, like Exec.
func (c *Client) Attach(ctx context.Context, req AttachRequest) (proto.Exit, error) {
	preq := proto.Request{Op: proto.OpAttach, Mark: req.Mark, OutFrom: req.StdoutFrom, ErrFrom: req.StderrFrom}
	ex, err := c.runExec(ctx, preq, ExecRequest{Mark: req.Mark, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Started: req.Started,
		Resizable: req.Resizable, TTY: req.Resizable != nil, KillGrace: req.KillGrace})
	var pe *proto.Error
	if errors.As(err, &pe) && pe.Kind == proto.ErrLost {
		return ex, fmt.Errorf("%w: %s", ErrLost, pe.Message)
	}
	return ex, err
}

// runExec opens an exec or attach stream and runs it to its Result.
func (c *Client) runExec(ctx context.Context, preq proto.Request, req ExecRequest) (proto.Exit, error) {
	st, err := c.open(preq)
	if err != nil {
		return proto.Exit{}, err
	}
	defer c.forget(st)
	if req.Started != nil {
		req.Started(func(sig int, group bool) error {
			b, _ := json.Marshal(proto.Signal{Signal: sig, Group: group})
			return c.send(proto.Frame{Type: proto.TSignal, Stream: st.id, Payload: b})
		})
	}
	if req.Resizable != nil && req.TTY {
		req.Resizable(func(rows, cols uint16) error {
			b, _ := json.Marshal(proto.Resize{Rows: rows, Cols: cols})
			return c.send(proto.Frame{Type: proto.TResize, Stream: st.id, Payload: b})
		})
	}
	if req.Stdin != nil {
		// Not waited for: a Read on the caller's reader cannot be
		// interrupted; it ends when the stream's credit is closed or the
		// reader returns.
		go func() { _ = st.sendInput(proto.TStdin, req.Stdin) }()
	} else if preq.Op == proto.OpAttach {
		// No input from here on: a stdin the agent kept open ends.
		_ = c.send(proto.Frame{Type: proto.TEOF, Stream: st.id})
	}
	stdout, stderr := orDiscard(req.Stdout), orDiscard(req.Stderr)
	var writeErr error
	wait := ctx.Done()
	killing := false
	for {
		ch, r, err, cancelled := st.next(wait)
		if cancelled {
			if killing { // the grace ran out
				return proto.Exit{Code: 137, Signal: 9, Killed: true}, ctx.Err()
			}
			killing = true
			_ = c.send(proto.Frame{Type: proto.TCancel, Stream: st.id})
			grace := req.KillGrace
			if grace <= 0 {
				grace = 2 * time.Second
			}
			graceC := make(chan struct{})
			t := time.AfterFunc(grace, func() { close(graceC) })
			defer t.Stop()
			wait = graceC
			continue
		}
		if r != nil || err != nil {
			if err != nil {
				return proto.Exit{}, err
			}
			if r.Error != nil && preq.Op == proto.OpAttach {
				return proto.Exit{}, r.Error
			}
			if r.Exit == nil {
				return proto.Exit{}, fmt.Errorf("%w: exec result without an exit status", ErrProtocol)
			}
			if ctx.Err() != nil {
				return *r.Exit, ctx.Err()
			}
			return *r.Exit, writeErr
		}
		w := stdout
		if ch.t == proto.TStderr {
			w = stderr
		} else if ch.t != proto.TStdout {
			return proto.Exit{}, fmt.Errorf("%w: %s frame on an exec", ErrProtocol, ch.t)
		}
		if writeErr == nil {
			if _, err := w.Write(ch.b); err != nil {
				writeErr = err
				_ = c.send(proto.Frame{Type: proto.TCancel, Stream: st.id})
			}
		}
		st.credit(len(ch.b))
		ch.recycle()
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// simple runs a request that takes no input and sends no data.
func (c *Client) simple(ctx context.Context, req proto.Request) (proto.Result, error) {
	st, err := c.open(req)
	if err != nil {
		return proto.Result{}, err
	}
	defer c.forget(st)
	ch, r, err, cancelled := st.next(ctx.Done())
	if cancelled {
		return proto.Result{}, ctx.Err()
	}
	if err != nil {
		return proto.Result{}, err
	}
	if r != nil {
		return *r, resultErr(r)
	}
	st.credit(len(ch.b))
	return proto.Result{}, fmt.Errorf("%w: %s frame on a %s", ErrProtocol, ch.t, req.Op)
}

func resultErr(r *proto.Result) error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}

// Read streams the regular file p to w (refusing files over max when max >
// 0) and returns its size.
func (c *Client) Read(ctx context.Context, p string, max int64, w io.Writer) (int64, error) {
	st, err := c.open(proto.Request{Op: proto.OpRead, Path: p, Max: max})
	if err != nil {
		return 0, err
	}
	defer c.forget(st)
	var n int64
	var writeErr error
	for {
		ch, r, err, cancelled := st.next(ctx.Done())
		if cancelled {
			return n, ctx.Err()
		}
		if err != nil {
			return n, err
		}
		if r != nil {
			if e := resultErr(r); e != nil {
				return n, e
			}
			if r.Bytes != n {
				return n, fmt.Errorf("%w: read: agent counted %d bytes, sent %d", ErrProtocol, r.Bytes, n)
			}
			return n, writeErr
		}
		if ch.t != proto.TData {
			return n, fmt.Errorf("%w: %s frame on a read", ErrProtocol, ch.t)
		}
		n += int64(len(ch.b))
		if max > 0 && n > max {
			return n, fmt.Errorf("%w: read: more than the %d bytes allowed", ErrProtocol, max)
		}
		if writeErr == nil {
			if _, err := w.Write(ch.b); err != nil {
				writeErr = err
				return n, err
			}
		}
		st.credit(len(ch.b))
		ch.recycle()
	}
}

// Write writes size bytes of r to the file p (mode, missing parents made).
func (c *Client) Write(ctx context.Context, p string, mode uint32, r io.Reader, size int64) error {
	st, err := c.open(proto.Request{Op: proto.OpWrite, Path: p, Mode: mode, Size: size, Parents: true})
	if err != nil {
		return err
	}
	defer c.forget(st)
	sendErr := make(chan error, 1)
	go func() { sendErr <- st.sendInput(proto.TData, io.LimitReader(r, size)) }()
	ch, res, err, cancelled := st.next(ctx.Done())
	if cancelled {
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	if res == nil {
		st.credit(len(ch.b))
		return fmt.Errorf("%w: %s frame on a write", ErrProtocol, ch.t)
	}
	if e := resultErr(res); e != nil {
		return e
	}
	select { // the sender is done once the agent counted every byte
	case e := <-sendErr:
		if e != nil {
			return e
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if res.Bytes != size {
		return fmt.Errorf("agent: wrote %d of %d bytes", res.Bytes, size)
	}
	return nil
}

// List lists a directory, or describes a file that is not one (self);
// truncated says there were more entries than the protocol carries.
func (c *Client) List(ctx context.Context, p string) (files []proto.FileInfo, self *proto.FileInfo, truncated bool, err error) {
	r, err := c.simple(ctx, proto.Request{Op: proto.OpList, Path: p})
	return r.Files, r.Stat, r.Count > 0, err
}

// Stat describes p (a symlink itself).
func (c *Client) Stat(ctx context.Context, p string) (proto.FileInfo, error) {
	r, err := c.simple(ctx, proto.Request{Op: proto.OpStat, Path: p})
	if err != nil {
		return proto.FileInfo{}, err
	}
	if r.Stat == nil {
		return proto.FileInfo{}, fmt.Errorf("%w: stat without a result", ErrProtocol)
	}
	return *r.Stat, nil
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, p string, mode uint32, parents bool) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpMkdir, Path: p, Mode: mode, Parents: parents})
	return err
}

// Remove removes a file, a symlink or an empty directory.
func (c *Client) Remove(ctx context.Context, p string) error {
	_, err := c.simple(ctx, proto.Request{Op: proto.OpRemove, Path: p})
	return err
}

// OOMKills is the sandbox's cgroup OOM kill counter.
func (c *Client) OOMKills(ctx context.Context) (int64, error) {
	r, err := c.simple(ctx, proto.Request{Op: proto.OpOOM})
	return r.Count, err
}

// KillMarked kills every process carrying the mark.
func (c *Client) KillMarked(ctx context.Context, mark string) (int64, error) {
	r, err := c.simple(ctx, proto.Request{Op: proto.OpKill, Mark: mark})
	return r.Count, err
}

// Watch waits up to timeout for changes in the directory p (at most max
// events); truncated: more came; gone: p itself was removed or moved.
func (c *Client) Watch(ctx context.Context, p string, timeout time.Duration, maxEvents int) (events []proto.WatchEvent, truncated, gone bool, err error) {
	st, err := c.open(proto.Request{Op: proto.OpWatch, Path: p, TimeoutMS: max(1, timeout.Milliseconds()), Max: int64(maxEvents)})
	if err != nil {
		return nil, false, false, err
	}
	defer c.forget(st)
	wait := ctx.Done()
	for {
		ch, r, err, cancelled := st.next(wait)
		if cancelled {
			// Ask the agent to stop and give what it has.
			_ = c.send(proto.Frame{Type: proto.TCancel, Stream: st.id})
			wait = nil
			t := time.AfterFunc(2*time.Second, func() { c.forget(st); st.finish(nil, ctx.Err()) })
			defer t.Stop()
			continue
		}
		if err != nil {
			return nil, false, false, err
		}
		if r != nil {
			if e := resultErr(r); e != nil {
				return nil, false, false, e
			}
			if len(r.Events) > maxEvents {
				return nil, false, false, fmt.Errorf("%w: watch: %d events, asked for %d", ErrProtocol, len(r.Events), maxEvents)
			}
			return r.Events, r.Count&1 != 0, r.Count&2 != 0, nil
		}
		st.credit(len(ch.b))
		return nil, false, false, fmt.Errorf("%w: %s frame on a watch", ErrProtocol, ch.t)
	}
}
