package dockerworker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// EnvProcessID is set in every exec's environment to its process id. It also
// lets the backend find the process tree from inside the container when the
// daemon's pids are not visible from the worker.
const EnvProcessID = "SBX_PROCESS_ID"

// process is one running exec.
type process struct {
	id     string
	execID string // a Docker exec's; "" for an agent's
	killed atomic.Bool
	// signal reaches an agent's process (nil for a Docker exec).
	signal func(sig int, group bool) error
	// resize changes an agent's PTY (nil without one).
	resize func(rows, cols uint16) error
}

// ociFailPrefix starts the message Docker writes to an exec's stdout when the
// runtime could not start the process (missing binary, bad cwd...).
var ociFailPrefix = []byte("OCI runtime exec failed")

// Exec runs p in the sandbox, streaming its output to p.Stdout and p.Stderr
// (a blocking Write blocks the stream: backpressure). When ctx is done the
// process tree is killed and Exec returns with ctx's error.
func (b *Backend) Exec(ctx context.Context, sandboxID string, p worker.Process) (worker.ExitStatus, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.ExitStatus{}, err
	}
	if len(p.Cmd) == 0 {
		return worker.ExitStatus{}, events.Errorf(events.CodeMissingField, "cmd is empty").With("field", "cmd")
	}
	if err := b.execSem.acquire(ctx, b.cfg.QueueWait, "execs"); err != nil {
		return worker.ExitStatus{}, err
	}
	defer b.execSem.release()
	defer sb.execEnded()
	return b.execIn(ctx, sb, p, "")
}

// execIn runs one process; user overrides the container's user when set.
// Processes of the sandbox's user go through its agent when it has one.
func (b *Backend) execIn(ctx context.Context, sb *sandbox, p worker.Process, user string) (worker.ExitStatus, error) {
	if user == "" {
		if cl := sb.agentOf(); cl != nil {
			return b.agentExec(ctx, sb, cl, p)
		}
		// The sandbox's user, never the container's: its init is root.
		_, u, err := b.containerFacts(ctx, sb)
		if err != nil {
			return worker.ExitStatus{}, err
		}
		user = u
	}
	return b.dockerExec(ctx, sb, false, p, user)
}

// dockerExec runs one process with a Docker exec. A clean one (the worker's
// own helpers) gets none of the sandbox's exec environment.
func (b *Backend) dockerExec(ctx context.Context, sb *sandbox, clean bool, p worker.Process, user string) (worker.ExitStatus, error) {
	var env []string
	if !clean {
		env = slices.Clone(sb.env)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		env = append(env, k+"="+p.Env[k])
	}
	if p.ID != "" {
		env = append(env, EnvProcessID+"="+p.ID)
	}
	var size *[2]uint // a terminal's rows and columns
	if p.TTY {
		size = &[2]uint{uint(cmp.Or(p.Rows, 24)), uint(cmp.Or(p.Cols, 80))}
	}
	ec, err := b.cli.ContainerExecCreate(ctx, sb.containerID, container.ExecOptions{
		Cmd: p.Cmd, Env: env, WorkingDir: p.Cwd, User: user, Tty: p.TTY, ConsoleSize: size,
		AttachStdin: p.Stdin != nil || p.TTY, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return worker.ExitStatus{}, b.containerErr(ctx, sb, "create exec", err)
	}
	proc := &process{id: p.ID, execID: ec.ID}
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
	// With a terminal the stream is raw (Tty), not multiplexed.
	hj, err := b.cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{Tty: p.TTY, ConsoleSize: size})
	if err != nil {
		return worker.ExitStatus{}, b.containerErr(ctx, sb, "start exec", err)
	}
	defer hj.Close()
	if size != nil {
		// A daemon before API 1.42 ignores ConsoleSize: size the terminal
		// now, before the process gets any input.
		if err := b.execResize(sb, ec.ID, size[0], size[1]); err != nil {
			b.log.Debug("size an exec's terminal", "sandbox", sb.id, slog.Any("err", err))
		}
		// Resizable from now on (before, PTYNotFound): a resize that came
		// earlier would be undone by the sizing above.
		sb.mu.Lock()
		proc.resize = func(rows, cols uint16) error { return b.execResize(sb, ec.ID, uint(rows), uint(cols)) }
		sb.mu.Unlock()
	}

	if p.Stdin != nil {
		// Not waited for: a Read on the caller's reader cannot be interrupted;
		// the caller closes it when Exec returns.
		go func() {
			_, _ = io.Copy(hj.Conn, p.Stdin)
			if !p.TTY {
				// A terminal stays open to the end of its process: the
				// daemon would take the end of its input for a hang-up
				// and drop the output still to come.
				_ = hj.CloseWrite()
			}
		}()
	}
	stdout := &holdWriter{w: discardIfNil(p.Stdout)}
	done := make(chan error, 1)
	go func() {
		var err error
		if p.TTY { // a terminal's stream is not multiplexed
			_, err = io.Copy(stdout, hj.Reader)
		} else {
			_, err = stdcopy.StdCopy(stdout, discardIfNil(p.Stderr), hj.Reader)
		}
		done <- err
	}()

	died, stopWatch := b.deathWatch(ctx, sb)
	defer stopWatch()
	var streamErr error
	select {
	case streamErr = <-done:
	case <-sb.died:
		// The container died under the process, as the daemon's die event
		// says (deaths.go): nothing will finish it, so end now.
		hj.Close()
		<-done
		return b.deathOf(sb)
	case <-died:
		// The sandbox's runtime died under the process (runsc: an OOM or a
		// crash takes the whole sandbox, and the exec would hang).
		hj.Close()
		<-done
		return b.deathOf(sb)
	case <-ctx.Done():
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KillGrace+5*time.Second)
		if err := b.killProcess(kctx, sb, proc); err != nil {
			b.log.Warn("kill process", "sandbox", sb.id, "process", p.ID, slog.Any("err", err))
		}
		cancel()
		select {
		case <-done:
		case <-time.After(b.cfg.KillGrace):
			hj.Close()
			<-done
		}
		return worker.ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
	}

	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ins, err := b.waitExec(ictx, ec.ID)
	if err != nil {
		return worker.ExitStatus{}, b.containerErr(ictx, sb, "inspect exec", err)
	}
	if sb.gone.Load() {
		return worker.ExitStatus{Code: ins.ExitCode}, events.Errorf(events.CodeSandboxGone, "sandbox %s was killed while the process ran", sb.id)
	}
	if ins.Pid == 0 && (ins.ExitCode == 126 || ins.ExitCode == 127) && stdout.held != nil {
		// The status (the exec's record) and the reply (the CLI's exit)
		// carry the same code.
		msg := strings.TrimSpace(string(stdout.held))
		code := startExitCode(ins.ExitCode, msg)
		return worker.ExitStatus{Code: code}, events.Errorf(events.CodeExecFailed, "%s", msg).With("cmd0", p.Cmd[0]).With("exit_code", code)
	}
	if err := stdout.flush(); err != nil && streamErr == nil {
		streamErr = err
	}
	if streamErr != nil {
		return worker.ExitStatus{}, fmt.Errorf("dockerworker: read exec output: %w", streamErr)
	}
	if b.diedUnder(ictx, sb, ins.ExitCode) {
		return b.deathOf(sb)
	}
	st := worker.ExitStatus{Code: ins.ExitCode}
	if ins.ExitCode > 128 && ins.ExitCode < 128+65 {
		st.Signal = signalName(syscall.Signal(ins.ExitCode - 128))
	}
	if ins.ExitCode == 128+int(syscall.SIGKILL) && !proc.killed.Load() {
		// Killed, but not by us: the sandbox may be gone, or it was an OOM.
		if sb.gone.Load() || !b.running(ictx, sb) || sb.diesWithin(dieEventWait) {
			return st, events.Errorf(events.CodeSandboxGone, "sandbox %s was removed while the process ran", sb.id)
		}
		st.OOMKilled = b.oomKilled(ictx, sb)
	}
	return st, nil
}

// running reports whether the sandbox's container still runs.
func (b *Backend) running(ctx context.Context, sb *sandbox) bool {
	c, err := b.cli.ContainerInspect(ctx, sb.containerID)
	return err == nil && c.State != nil && c.State.Running
}

// waitExec inspects an exec until the daemon reports it ended: the attach
// stream can close a moment before the exit code is recorded.
// The gap is usually well under a millisecond, so the first retries come
// quickly and only then back off.
func (b *Backend) waitExec(ctx context.Context, execID string) (container.ExecInspect, error) {
	delay := 200 * time.Microsecond
	for attempt := 0; ; attempt++ {
		ins, err := b.cli.ContainerExecInspect(ctx, execID)
		if err != nil || !ins.Running {
			return ins, err
		}
		select {
		case <-ctx.Done():
			return ins, ctx.Err()
		case <-time.After(delay):
		}
		if attempt >= 10 {
			delay = min(2*delay, 50*time.Millisecond)
		}
	}
}

// containerErr classifies an error of a call on a sandbox's container: a
// container that is gone or no longer running is SandboxGone.
func (b *Backend) containerErr(ctx context.Context, sb *sandbox, what string, err error) error {
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeSandboxGone, "sandbox %s: container is gone or not running", sb.id), err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("dockerworker: %s in sandbox %s: %w", what, sb.id, err)
}

// holdWriter passes output through, except a first chunk that looks like the
// runtime's exec-failure message: that one is held until it is known whether
// the process started at all.
type holdWriter struct {
	w       io.Writer
	started bool
	held    []byte
}

func (h *holdWriter) Write(p []byte) (int, error) {
	if !h.started {
		h.started = true
		if bytes.HasPrefix(p, ociFailPrefix) {
			h.held = bytes.Clone(p)
			return len(p), nil
		}
	}
	if err := h.flush(); err != nil {
		return 0, err
	}
	return h.w.Write(p)
}

func (h *holdWriter) flush() error {
	if h.held == nil {
		return nil
	}
	b := h.held
	h.held = nil
	_, err := h.w.Write(b)
	return err
}

func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// oomKilled reports whether the container's memory cgroup has OOM-killed a
// process since the last check, reading the counter from inside.
// The counter is read by the worker's static helper (never the image's cat).
func (b *Backend) oomKilled(ctx context.Context, sb *sandbox) bool {
	n := -1
	if sb.hasAgent {
		var out bytes.Buffer
		if err := b.helper(ctx, sb, "", []string{"oom"}, nil, &limitedBuffer{b: &out, max: 64}); err == nil {
			if x, err := strconv.Atoi(strings.TrimSpace(out.String())); err == nil && x >= 0 {
				n = x
			}
		}
	}
	if n < 0 {
		ins, err := b.cli.ContainerInspect(ctx, sb.containerID)
		return err == nil && ins.State != nil && ins.State.OOMKilled
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if n > sb.oomSeen {
		sb.oomSeen = n
		return true
	}
	return false
}

// Signal sends a signal to a running process's process group.
func (b *Backend) Signal(ctx context.Context, sandboxID, processID, signal string) error {
	sig, ok := parseSignal(signal)
	if !ok {
		return events.Errorf(events.CodeInvalidValue, "unknown signal %q", signal).With("field", "signal")
	}
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	proc := sb.procs[processID]
	sb.mu.Unlock()
	if proc == nil {
		return events.Errorf(events.CodeProcessNotFound, "no running process %s in sandbox %s", processID, sandboxID)
	}
	if proc.signal != nil {
		if err := proc.signal(int(sig), true); err != nil {
			return b.agentFailed(ctx, sb, err)
		}
		return nil
	}
	return b.signalProcess(ctx, sb, proc, sig)
}

// killProcess kills a process and everything it started.
func (b *Backend) killProcess(ctx context.Context, sb *sandbox, proc *process) error {
	proc.killed.Store(true)
	return b.signalProcess(ctx, sb, proc, syscall.SIGKILL)
}

// signalProcess delivers sig to the exec's process tree: from the host when
// the daemon's pid is visible here (and really is in this container), else
// from inside the container by the process-id mark in the environment.
func (b *Backend) signalProcess(ctx context.Context, sb *sandbox, proc *process, sig syscall.Signal) error {
	var ins container.ExecInspect
	var err error
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		ins, err = b.cli.ContainerExecInspect(ctx, proc.execID)
		if err != nil {
			return fmt.Errorf("dockerworker: inspect exec: %w", err)
		}
		if !ins.Running && ins.Pid == 0 {
			// Not started yet (or failed to start): wait for it to start.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(delay):
				continue
			}
		}
		break
	}
	if !ins.Running {
		if sig == syscall.SIGKILL {
			return nil
		}
		return events.Errorf(events.CodeProcessExited, "process %s has exited", proc.id)
	}
	if hostSignalTree(sb.containerID, ins.Pid, sig, proc.id) {
		return nil
	}
	if proc.id == "" {
		return errors.New("dockerworker: process pid not visible from the worker and the process has no id to find it by")
	}
	return b.signalInside(ctx, sb, proc.id, sig)
}

// signalInside signals, from inside the container and as the sandbox user,
// every process whose environment carries the process's mark.
func (b *Backend) signalInside(ctx context.Context, sb *sandbox, processID string, sig syscall.Signal) error {
	script := `for d in /proc/[0-9]*; do
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$1=$2"; then kill -$3 "${d#/proc/}" 2>/dev/null; fi
done; exit 0`
	var errb bytes.Buffer
	st, err := b.execIn(ctx, sb, worker.Process{
		Cmd:    []string{"sh", "-c", script, "sh", EnvProcessID, processID, strconv.Itoa(int(sig))},
		Stderr: &errb,
	}, "")
	if err != nil {
		return fmt.Errorf("dockerworker: signal inside sandbox: %w", err)
	}
	if st.Code != 0 {
		return fmt.Errorf("dockerworker: signal inside sandbox: exit %d: %s", st.Code, strings.TrimSpace(errb.String()))
	}
	return nil
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE, "ALRM": syscall.SIGALRM,
	"TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP,
	"WINCH": syscall.SIGWINCH, "ABRT": syscall.SIGABRT, "SEGV": syscall.SIGSEGV,
}

// parseSignal accepts TERM, SIGTERM, sigterm or 15.
func parseSignal(s string) (syscall.Signal, bool) {
	s = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if sig, ok := signals[s]; ok {
		return sig, true
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), true
	}
	return 0, false
}

func signalName(sig syscall.Signal) string {
	for name, s := range signals {
		if s == sig {
			return name
		}
	}
	return strconv.Itoa(int(sig))
}

// startExitCode is the exit code, as a shell gives it, of a command that
// could not start: 127 not found, 126 found but not executable. runc exits
// 126 for both, and says which only in its message (ours to read: it comes
// from the runtime, not from the sandbox, whose process never started).
func startExitCode(code int, runtimeMsg string) int {
	if code == 126 && (strings.Contains(runtimeMsg, "executable file not found") || strings.Contains(runtimeMsg, "no such file or directory")) {
		return 127
	}
	return code
}

// execResize sizes a Docker exec's terminal.
func (b *Backend) execResize(sb *sandbox, execID string, rows, cols uint) error {
	// A resize is one bounded Docker call; the worker runtime gives it no context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.cli.ContainerExecResize(ctx, execID, container.ResizeOptions{Height: rows, Width: cols}); err != nil {
		return fmt.Errorf("%w: %w", events.Errorf(events.CodePTYNotFound, "the terminal of exec %s in sandbox %s: %v", execID, sb.id, err), err)
	}
	return nil
}
