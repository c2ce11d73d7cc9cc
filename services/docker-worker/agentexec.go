package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

func clampWin(n int) uint16 { return uint16(min(max(n, 0), 1000)) }

// Resize implements worker.Resizer for a process on a PTY.
func (b *Backend) Resize(ctx context.Context, sandboxID, processID string, rows, cols int) error {
	if rows <= 0 || cols <= 0 || rows > 1000 || cols > 1000 {
		return events.Errorf(events.CodeInvalidValue, "window size %dx%d out of range", rows, cols).With("field", "rows")
	}
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	proc := sb.procs[processID]
	var resize func(rows, cols uint16) error
	if proc != nil {
		resize = proc.resize
	}
	sb.mu.Unlock()
	if resize == nil {
		return events.Errorf(events.CodePTYNotFound, "no process %s on a terminal in sandbox %s", processID, sandboxID).With("process_id", processID)
	}
	if err := resize(uint16(rows), uint16(cols)); err != nil {
		if _, ok := errors.AsType[*events.Error](err); ok {
			return err // a Docker exec's terminal (the fallback)
		}
		return b.agentFailed(ctx, sb, err)
	}
	return nil
}

// agentExec runs one process through the sandbox's agent.
func (b *Backend) agentExec(ctx context.Context, sb *sandbox, cl *agent.Client, p worker.Process) (worker.ExitStatus, error) {
	env := slices.Clone(sb.env)
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		env = append(env, k+"="+p.Env[k])
	}
	proc := &process{id: p.ID}
	if p.ID != "" {
		sb.mu.Lock()
		sb.procs[p.ID] = proc
		sb.mu.Unlock()
		defer func() {
			sb.mu.Lock()
			delete(sb.procs, p.ID)
			sb.mu.Unlock()
		}()
	}
	req := agent.ExecRequest{Argv: p.Cmd, Env: env, Cwd: p.Cwd, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr,
		Mark: p.ID, KillGrace: b.cfg.KillGrace,
		Started: func(s agent.Signaller) {
			sb.mu.Lock()
			proc.signal = s
			sb.mu.Unlock()
		},
		TTY: p.TTY, Rows: clampWin(p.Rows), Cols: clampWin(p.Cols),
		Resizable: func(r func(rows, cols uint16) error) {
			sb.mu.Lock()
			proc.resize = r
			sb.mu.Unlock()
		}}
	if dl, ok := ctx.Deadline(); ok {
		// The agent's own backstop, a second after the worker's deadline:
		// it holds when no worker is attached (ADR 18).
		req.Timeout = time.Until(dl) + time.Second
	}
	ex, err := cl.Exec(ctx, req)
	return b.agentExit(ctx, sb, cl, ex, err, p.Cmd[0])
}

// agentExit turns an agent's exec outcome into the worker's.
func (b *Backend) agentExit(ctx context.Context, sb *sandbox, cl *agent.Client, ex proto.Exit, err error, cmd0 string) (worker.ExitStatus, error) {
	if err != nil {
		if ctx.Err() != nil && ex.Killed {
			return worker.ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
		}
		return worker.ExitStatus{}, b.agentFailed(ctx, sb, err)
	}
	if ex.StartError != "" {
		return worker.ExitStatus{Code: ex.Code}, events.Errorf(events.CodeExecFailed, "%s", ex.StartError).With("cmd0", cmd0).With("exit_code", ex.Code)
	}
	if sb.gone.Load() {
		return worker.ExitStatus{Code: ex.Code}, events.Errorf(events.CodeSandboxGone, "sandbox %s was killed while the process ran", sb.id)
	}
	st := worker.ExitStatus{Code: ex.Code}
	if ex.Signal > 0 {
		st.Signal = signalName(syscall.Signal(ex.Signal))
	}
	if ex.Signal == int(syscall.SIGKILL) && !ex.Killed && !ex.TimedOut {
		// Killed, but not by us: an OOM, or the sandbox is going.
		if n, err := cl.OOMKills(ctx); err == nil {
			sb.mu.Lock()
			if int(n) > sb.oomSeen {
				sb.oomSeen, st.OOMKilled = int(n), true
			}
			sb.mu.Unlock()
		}
	}
	if ex.TimedOut && ctx.Err() == nil {
		// The agent's backstop fired: no worker deadline was running (a
		// re-attached process).
		if st.Signal == "" {
			st.Signal = "KILL"
		}
		return st, events.Errorf(events.CodeExecutionTimeout, "process ran past its timeout and was killed")
	}
	return st, nil
}

// Reattach implements worker.Reattacher: the sandbox's agent kept the
// process (its process table, ADR 18); its output is streamed on from the
// offsets given.
func (b *Backend) Reattach(ctx context.Context, sandboxID string, p worker.ReattachProcess) (worker.ExitStatus, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.ExitStatus{}, fmt.Errorf("%w: %w", worker.ErrNotReattachable, err)
	}
	cl := sb.agentOf()
	if cl == nil {
		return worker.ExitStatus{}, fmt.Errorf("%w: sandbox %s has no agent", worker.ErrNotReattachable, sandboxID)
	}
	proc := &process{id: p.ID}
	sb.mu.Lock()
	sb.procs[p.ID] = proc
	sb.mu.Unlock()
	defer func() {
		sb.mu.Lock()
		delete(sb.procs, p.ID)
		sb.mu.Unlock()
	}()
	req := agent.AttachRequest{Mark: p.ID, StdoutFrom: p.StdoutFrom, StderrFrom: p.StderrFrom,
		Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr, KillGrace: b.cfg.KillGrace,
		Started: func(s agent.Signaller) {
			sb.mu.Lock()
			proc.signal = s
			sb.mu.Unlock()
		}}
	if p.TTY {
		req.Resizable = func(r func(rows, cols uint16) error) {
			sb.mu.Lock()
			proc.resize = r
			sb.mu.Unlock()
		}
	}
	ex, err := cl.Attach(ctx, req)
	if errors.Is(err, agent.ErrLost) {
		return worker.ExitStatus{}, fmt.Errorf("%w: %w", worker.ErrNotReattachable, err)
	}
	return b.agentExit(ctx, sb, cl, ex, err, p.ID)
}

// Abandon implements worker.Reattacher: the agent kills the process's tree
// (every process carrying its mark).
func (b *Backend) Abandon(ctx context.Context, sandboxID, processID string) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	cl := sb.agentOf()
	if cl == nil {
		return nil // no agent: nothing keeps the process for us to end
	}
	_, err = cl.KillMarked(ctx, processID)
	return err
}
