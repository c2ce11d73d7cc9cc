package modalworker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	tcr "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/taskcommandrouter"
	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
)

// EnvProcessID is set in every process the backend starts: Modal has no
// RPC that kills one exec, so the backend finds an exec's processes by it
// (through /proc in another exec) to kill them.
const EnvProcessID = "SANDBOXIO_PROCESS_ID"

// killScript kills every process whose environment holds
// SANDBOXIO_PROCESS_ID=$1: the exec and whatever it started, whatever its
// process group or session (a setsid child keeps the variable). One grep
// reads every /proc/*/environ (a fork per process took seconds on a busy
// host and ran out of time); the search repeats until nothing carries the
// mark, so a child forked during a round dies in the next. A grep without
// -z (NUL-separated input) gets the per-process loop.
const killScript = `m="` + EnvProcessID + `=$1"
if printf 'a\0' | grep -qzxF a 2>/dev/null; then
  marked() { grep -slzxF "$m" /proc/[0-9]*/environ 2>/dev/null; }
else
  marked() { for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null | grep -qxF "$m" && echo "$f"; done; }
fi
n=0
while [ "$n" -lt 50 ]; do
  found=$(marked)
  [ -z "$found" ] && exit 0
  for f in $found; do p=${f#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; done
  n=$((n+1))
done
exit 0`

// maxArgBytes is the SDKs' client-side limit on an exec's argv.
const maxArgBytes = 65536

// Exec implements worker.Backend: TaskExecStart with the argv as given (no
// shell), both stdio streams read by offset, stdin written by offset, then
// TaskExecWait.
func (b *Backend) Exec(ctx context.Context, sandboxID string, p worker.Process) (worker.ExitStatus, error) {
	if len(p.Cmd) == 0 || p.Cmd[0] == "" {
		return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "empty command")
	}
	n := 0
	for _, a := range p.Cmd {
		n += len(a)
	}
	if n > maxArgBytes {
		return worker.ExitStatus{}, events.Errorf(events.CodePayloadTooLarge, "Modal takes at most %d bytes of arguments; write large inputs to a file", maxArgBytes).With("field", "cmd")
	}
	if p.Cwd != "" && !strings.HasPrefix(p.Cwd, "/") {
		return worker.ExitStatus{}, events.Errorf(events.CodeInvalidValue, "Modal runs a command in an absolute directory; cwd %q is relative", p.Cwd).With("field", "cwd")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.ExitStatus{}, err
	}
	execID := modalapi.NewUUID()
	env := make(map[string]string, len(p.Env)+1)
	for k, v := range p.Env {
		env[k] = v
	}
	env[EnvProcessID] = p.ID
	req := &tcr.TaskExecStartRequest{ExecId: execID, CommandArgs: p.Cmd, Env: env,
		StdoutConfig: tcr.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE, StderrConfig: tcr.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE}
	if p.Cwd != "" {
		req.Workdir = &p.Cwd
	}
	if dl, ok := ctx.Deadline(); ok {
		// A backstop: Modal kills the exec a little after our own deadline
		// even if the kill below cannot reach it.
		secs := ceilSeconds(time.Until(dl)) + 2
		req.TimeoutSecs = &secs
	}
	if err := bx.router.ExecStart(ctx, req); err != nil {
		if ctx.Err() != nil {
			return worker.ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
		}
		return worker.ExitStatus{}, b.routerError(ctx, bx, err, "start exec")
	}

	// The stdio readers outlive ctx a little: after a kill they drain what
	// the process wrote before it died.
	readCtx, stopRead := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRead()
	var readers sync.WaitGroup
	readErrs := make([]error, 2)
	prog := newProgress()
	for i, w := range []io.Writer{p.Stdout, p.Stderr} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			_, readErrs[i] = bx.router.ReadStdio(readCtx, execID, tcr.TaskExecStdioFileDescriptor(i), prog.writer(w))
		}()
	}
	pumpCtx, stopPump := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPump()
	if p.Stdin == nil {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
		if err := bx.router.WriteStdin(cctx, execID, 0, nil, true); err != nil && !isCode(err, codes.FailedPrecondition) && ctx.Err() == nil {
			b.log.Debug("stdin not closed", "sandbox_id", sandboxID, slog.String("err", grpcMessage(err)))
		}
		cancel()
	} else {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pumpStdin(pumpCtx, bx, execID, p.Stdin)
		}()
	}

	exit, werr := bx.router.Wait(ctx, execID)
	if ctx.Err() != nil {
		b.killExec(ctx, bx, execID, p.ID)
		b.drain(&readers, stopRead, prog)
		return worker.ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
	}
	if werr != nil {
		stopRead()
		readers.Wait()
		return worker.ExitStatus{}, b.routerError(ctx, bx, werr, "wait for exec")
	}
	b.drain(&readers, stopRead, prog)
	for _, rerr := range readErrs {
		if rerr != nil && !errors.Is(rerr, context.Canceled) {
			return worker.ExitStatus{}, b.routerError(ctx, bx, rerr, "read output")
		}
	}
	return exitStatus(exit), nil
}

// drain waits for the stdio readers after the process exited. Output that
// is still flowing (or being written out under backpressure) is waited
// for; the readers are stopped only once their streams stayed idle for
// DrainTimeout (a background child of the process may hold its pipes
// open), so no byte the process wrote before it exited is cut off.
func (b *Backend) drain(readers *sync.WaitGroup, stop context.CancelFunc, prog *progress) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	t := time.NewTicker(max(b.cfg.DrainTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	prog.touch()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if prog.idleFor() >= b.cfg.DrainTimeout {
				stop()
				<-done
				return
			}
		}
	}
}

// progress tracks when the stdio readers last delivered output and whether
// a write to the runtime is under way.
type progress struct {
	last atomic.Int64 // unix nanoseconds
	busy atomic.Int32
}

func newProgress() *progress {
	p := &progress{}
	p.touch()
	return p
}

func (p *progress) touch() { p.last.Store(time.Now().UnixNano()) }

func (p *progress) idleFor() time.Duration {
	if p.busy.Load() > 0 {
		return 0
	}
	return time.Since(time.Unix(0, p.last.Load()))
}

func (p *progress) writer(w io.Writer) io.Writer { return progressWriter{p: p, w: w} }

type progressWriter struct {
	p *progress
	w io.Writer
}

func (pw progressWriter) Write(b []byte) (int, error) {
	pw.p.busy.Add(1)
	defer func() { pw.p.busy.Add(-1); pw.p.touch() }()
	return pw.w.Write(b)
}

// pumpStdin copies r to the exec's stdin by offset, then closes it.
func (b *Backend) pumpStdin(ctx context.Context, bx *box, execID string, r io.Reader) {
	buf := make([]byte, 64<<10)
	var off uint64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
			werr := bx.router.WriteStdin(cctx, execID, off, append([]byte(nil), buf[:n]...), false)
			cancel()
			if werr != nil {
				if ctx.Err() == nil && !isCode(werr, codes.FailedPrecondition) && !isCode(werr, codes.NotFound) {
					b.log.Debug("stdin not delivered", "sandbox_id", bx.id, slog.String("err", grpcMessage(werr)))
				}
				return
			}
			off += uint64(n)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
			_ = bx.router.WriteStdin(cctx, execID, off, nil, true)
			cancel()
			return
		}
	}
}

// killExec kills an exec's processes through another exec (Modal has no
// per-exec kill), then waits, bounded by KillTimeout, for it to end.
func (b *Backend) killExec(ctx context.Context, bx *box, execID, processID string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KillTimeout)
	defer cancel()
	killID := modalapi.NewUUID()
	secs := uint32(b.cfg.KillTimeout / time.Second)
	if secs == 0 {
		secs = 1
	}
	err := bx.router.ExecStart(kctx, &tcr.TaskExecStartRequest{ExecId: killID, CommandArgs: []string{"/bin/sh", "-c", killScript, "sh", processID},
		TimeoutSecs: &secs, StdoutConfig: tcr.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_DEVNULL, StderrConfig: tcr.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_DEVNULL})
	if err == nil {
		_, err = bx.router.Wait(kctx, killID)
	}
	if err == nil {
		_, err = bx.router.Wait(kctx, execID)
	}
	if err != nil && !isCode(err, codes.NotFound) {
		b.log.Warn("process not killed", "sandbox_id", bx.id, "process_id", processID, slog.String("err", grpcMessage(err)))
	}
}

// routerError classifies a router failure. NOT_FOUND means the task is gone:
// the sandbox ended (its lifetime, a kill, Modal).
func (b *Backend) routerError(ctx context.Context, bx *box, err error, op string) error {
	if isCode(err, codes.NotFound) || isCode(err, codes.FailedPrecondition) {
		if res := b.finished(ctx, bx); res != nil {
			b.forget(bx.id)
			return wrap(events.Errorf(events.CodeSandboxGone, "Modal sandbox %s has ended (%s)", bx.modalID, endReason(res)), err)
		}
	}
	return sbxError(err, op)
}

// finished returns the sandbox's result when it has ended.
func (b *Backend) finished(ctx context.Context, bx *box) *pb.GenericResult {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.RequestTimeout)
	defer cancel()
	resp, err := b.api.API().SandboxWait(cctx, &pb.SandboxWaitRequest{SandboxId: bx.modalID, Timeout: 0})
	if err != nil {
		if isCode(err, codes.NotFound) {
			return &pb.GenericResult{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED}
		}
		return nil
	}
	return resp.Result
}

func endReason(r *pb.GenericResult) string {
	switch r.GetStatus() {
	case pb.GenericResult_GENERIC_STATUS_TIMEOUT:
		return "its lifetime ran out"
	case pb.GenericResult_GENERIC_STATUS_TERMINATED:
		return "terminated"
	case pb.GenericResult_GENERIC_STATUS_IDLE_TIMEOUT:
		return "idle timeout"
	}
	return r.GetStatus().String()
}

// signalNames are the short names of the signals an exec can die of.
var signalNames = map[int]string{
	int(syscall.SIGHUP): "HUP", int(syscall.SIGINT): "INT", int(syscall.SIGQUIT): "QUIT", int(syscall.SIGILL): "ILL",
	int(syscall.SIGTRAP): "TRAP", int(syscall.SIGABRT): "ABRT", int(syscall.SIGBUS): "BUS", int(syscall.SIGFPE): "FPE",
	int(syscall.SIGKILL): "KILL", int(syscall.SIGUSR1): "USR1", int(syscall.SIGSEGV): "SEGV", int(syscall.SIGUSR2): "USR2",
	int(syscall.SIGPIPE): "PIPE", int(syscall.SIGALRM): "ALRM", int(syscall.SIGTERM): "TERM", int(syscall.SIGXCPU): "XCPU",
	int(syscall.SIGXFSZ): "XFSZ", int(syscall.SIGSYS): "SYS",
}

// exitStatus converts TaskExecWait's answer: a signal becomes 128+signal.
func exitStatus(e modalapi.Exit) worker.ExitStatus {
	if e.Signal == 0 {
		return worker.ExitStatus{Code: e.Code}
	}
	name := signalNames[e.Signal]
	if name == "" {
		name = strconv.Itoa(e.Signal)
	}
	return worker.ExitStatus{Code: 128 + e.Signal, Signal: name}
}

// runCapture runs a helper exec to completion, collecting its output
// (stdin, if any, through TaskExecStdinWriteStream).
func (b *Backend) runCapture(ctx context.Context, bx *box, argv []string, stdin []byte, stdout io.Writer) (int, []byte, error) {
	execID := modalapi.NewUUID()
	if err := bx.router.ExecStart(ctx, &tcr.TaskExecStartRequest{ExecId: execID, CommandArgs: argv,
		StdoutConfig: tcr.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE, StderrConfig: tcr.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE}); err != nil {
		return 0, nil, b.routerError(ctx, bx, err, "start helper")
	}
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, errs[0] = bx.router.ReadStdio(ctx, execID, tcr.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT, stdout)
	}()
	go func() {
		defer wg.Done()
		_, errs[1] = bx.router.ReadStdio(ctx, execID, tcr.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR, &stderr)
	}()
	if stdin != nil {
		if err := bx.router.WriteStdinStream(ctx, execID, stdin); err != nil && !isCode(err, codes.FailedPrecondition) && !isCode(err, codes.Aborted) {
			errs[2] = err
		}
	} else {
		_ = bx.router.WriteStdin(ctx, execID, 0, nil, true)
	}
	exit, err := bx.router.Wait(ctx, execID)
	wg.Wait()
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		return 0, nil, b.routerError(ctx, bx, err, "helper exec")
	}
	return exit.Code, stderr.Bytes(), nil
}
