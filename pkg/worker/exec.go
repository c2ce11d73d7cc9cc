package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

var (
	errSandboxKilled = errors.New("sandbox killed")
	errSignalKill    = errors.New("killed by signal KILL")
)

// process is a running exec or run_code.
type process struct {
	id     string
	cancel context.CancelCauseFunc
	// stdin is nil when stdin is not kept open. Sends and the close happen
	// under mu, so data after a close is refused instead of panicking.
	stdin  chan []byte
	mu     sync.Mutex
	closed bool
}

func (p *process) closeStdin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil && !p.closed {
		p.closed = true
		close(p.stdin)
	}
}

// sendStdin queues data without blocking; it fails when stdin is closed or
// the process has not read the last 64 writes.
func (p *process) sendStdin(data []byte) *events.Error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return events.Errorf(events.CodeProcessExited, "stdin of process %s is closed", p.id)
	}
	select {
	case p.stdin <- data:
		return nil
	default:
		return events.Errorf(events.CodeOverloaded, "process %s is not reading its stdin", p.id)
	}
}

// startProcess registers a process; the returned context ends with the
// exec timeout, the sandbox deadline, a KILL signal or a kill.
func (w *Worker) startProcess(sb *sandbox, id string, timeout time.Duration, keepStdin bool) (*process, context.Context, context.CancelFunc, *events.Error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !sb.ready {
		return nil, nil, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is not running", sb.id)
	}
	// A kill has begun (or ended): the container is being removed, so
	// nothing new may start in it.
	if sb.gone || sb.killWait != nil {
		return nil, nil, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is being killed", sb.id)
	}
	if w.isStopping() {
		return nil, nil, nil, events.Errorf(events.CodeWorkerShutdown, "worker %s is shutting down", w.cfg.WorkerID)
	}
	// A process id names output subjects and de-duplication ids, so it is
	// never reused within a sandbox (among its last maxRememberedPIDs).
	if sb.usedPIDs.seen(id) {
		return nil, nil, nil, events.Errorf(events.CodeInvalidValue, "process id %s was already used in this sandbox", id).With("field", "process_id")
	}
	sb.usedPIDs.add(id)
	// The sandbox's deadline is not put here: the kill at the deadline
	// cancels every process, and set_timeout may move it.
	ctx, cancelCause := context.WithCancelCause(detached())
	var cancelTimeout context.CancelFunc = func() {}
	if timeout > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, timeout, context.DeadlineExceeded)
	}
	p := &process{id: id, cancel: cancelCause}
	if keepStdin {
		p.stdin = make(chan []byte, 64)
	}
	sb.procs[id] = p
	return p, ctx, func() {
		cancelTimeout()
		cancelCause(nil)
		sb.mu.Lock()
		delete(sb.procs, id)
		sb.mu.Unlock()
	}, nil
}

// stdinReader builds a process's stdin: the request's bytes, then, when kept
// open, whatever stdin requests send until one closes it.
func (w *Worker) stdinReader(ctx context.Context, p *process, initial []byte) io.Reader {
	if p.stdin == nil {
		if len(initial) == 0 {
			return nil
		}
		return bytes.NewReader(initial)
	}
	pr, pw := io.Pipe()
	// When the process ends, unblock a write the process never read.
	context.AfterFunc(ctx, func() { _ = pr.CloseWithError(io.ErrClosedPipe) })
	w.goTracked(func() {
		defer pw.Close()
		if len(initial) > 0 {
			if _, err := pw.Write(initial); err != nil {
				return
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case b, ok := <-p.stdin:
				if !ok {
					return
				}
				if _, err := pw.Write(b); err != nil {
					return
				}
			}
		}
	})
	return pr
}

// effectiveOutputLimit is the per-stream output cap of an exec that asked
// for requested bytes (0: the default): a buffered exec's is kept in memory,
// so it is at most eight times the default.
func effectiveOutputLimit(requested int64, stream bool) int64 {
	if stream {
		if requested <= 0 {
			return events.DefaultStreamOutputCap
		}
		return requested
	}
	if requested <= 0 || requested > events.DefaultBufferedOutputCap*8 {
		return min(max(requested, events.DefaultBufferedOutputCap), events.DefaultBufferedOutputCap*8)
	}
	return requested
}

func (w *Worker) handleExec(sb *sandbox, env cemsg.Envelope, r *events.ExecRequest) (any, *events.Error) {
	if e := w.checkOutputLimit(r.OutputLimit); e != nil {
		return nil, e
	}
	if r.Stream && w.shareSpent(sb) {
		return nil, w.shareExceeded(sb)
	}
	pid := r.ProcessID
	if pid == "" {
		pid = events.NewID()
	}
	stdin, _ := r.StdinBytes()
	p, ctx, done, e := w.startProcess(sb, pid, time.Duration(r.TimeoutMS)*time.Millisecond, r.KeepStdinOpen)
	if e != nil {
		return nil, e
	}
	summary := map[string]string{"cmd": strings.Join(r.Cmd, " "), "process_id": pid}
	if r.Cwd != "" {
		summary["cwd"] = r.Cwd
	}
	if !r.Stream && env.ReplyTo != "" {
		// Where the answer goes: a restarted worker that re-attaches to the
		// process answers there (lostprocs.go).
		summary["reply_to"] = env.ReplyTo
	}
	// Its output cap, open stdin and terminal, for the same restarted worker.
	summary["output_limit"] = strconv.FormatInt(effectiveOutputLimit(r.OutputLimit, r.Stream), 10)
	if r.OutputTail {
		summary["output_tail"] = "true"
	}
	if r.KeepStdinOpen {
		summary["stdin_open"] = "true"
	}
	if r.TTY {
		summary["tty"] = "true"
	}
	if len(r.Env) > 0 {
		keys := make([]string, 0, len(r.Env))
		for k := range r.Env {
			keys = append(keys, k)
		}
		summary["env_keys"] = strings.Join(keys, ",")
	}
	op, aerr := w.openOp(detached(), events.OpExec, env.ID, sb.id, sb.record.Owner, env.Traceparent, sb.redaction(), summary)
	if aerr != nil {
		done()
		return nil, aerr
	}
	op.rec.ProcessID = pid
	op.rec.BytesIn = int64(len(stdin))
	proc := Process{ID: pid, Cmd: r.Cmd, Env: r.Env, Cwd: r.Cwd, Stdin: w.stdinReader(ctx, p, stdin), TTY: r.TTY, Rows: r.Rows, Cols: r.Cols}

	if !r.Stream {
		defer done()
		limit := effectiveOutputLimit(r.OutputLimit, false)
		stdout, stderr := &cappedBuffer{limit: limit, keepTail: r.OutputTail}, &cappedBuffer{limit: limit, keepTail: r.OutputTail}
		proc.Stdout, proc.Stderr = stdout, stderr
		res, e := w.runProcess(ctx, sb, proc, func(ctx context.Context) (ExitStatus, error) {
			return w.backend.Exec(ctx, sb.id, proc)
		})
		res.ProcessID = pid
		fillOutput(&res, stdout, stderr)
		op.rec.BytesOut = stdout.total + stderr.total
		op.rec.ExitCode = &res.ExitCode
		op.close(e)
		if e != nil {
			if e.Code == events.CodeExecutionTimeout || e.Code == events.CodeSandboxOOMKilled {
				return nil, e.With("result", res)
			}
			return nil, e
		}
		return res, nil
	}

	// Streamed: answer now, then run and publish.
	subjects := events.StreamSubjectsFor(sb.tenantToken(), sb.id, pid)
	limit := effectiveOutputLimit(r.OutputLimit, true)
	stdout := newStreamWriter(w.js, subjects.Stdout, sb.id+"-"+pid+"-o", w.cfg.ChunkSize, w.cfg.FlushInterval, w.cfg.PublishWindow, limit)
	stderr := newStreamWriter(w.js, subjects.Stderr, sb.id+"-"+pid+"-e", w.cfg.ChunkSize, w.cfg.FlushInterval, w.cfg.PublishWindow, limit)
	stdout.share, stderr.share = w.outputShare(sb), w.outputShare(sb)
	proc.Stdout, proc.Stderr = stdout, stderr
	w.reply(env.ReplyTo, events.ExecStreamReply{SandboxID: sb.id, ProcessID: pid, Subjects: subjects}, nil)
	w.goTracked(func() {
		defer done()
		res, e := w.runProcess(ctx, sb, proc, func(ctx context.Context) (ExitStatus, error) {
			return w.backend.Exec(ctx, sb.id, proc)
		})
		w.finishStream(sb, pid, stdout, stderr, res, e, op)
		if stdout.shareCut || stderr.shareCut || sb.usage.output.Load()-sb.usage.saved.Load() >= usageSaveStep {
			w.goTracked(func() { w.saveUsage(context.WithoutCancel(ctx), sb) })
		}
	})
	return nil, nil
}

// fillOutput puts a buffered exec's output into its result.
func fillOutput(res *events.ExecResult, stdout, stderr *cappedBuffer) {
	res.Stdout, res.StdoutCut = stdout.output()
	res.Stderr, res.StderrCut = stderr.output()
	res.StdoutBytes, res.StderrBytes = stdout.total, stderr.total
	res.Truncated = stdout.truncated || stderr.truncated
}

// runProcess runs fn and turns its outcome into an ExecResult and an SBX error.
func (w *Worker) runProcess(ctx context.Context, sb *sandbox, proc Process, fn func(context.Context) (ExitStatus, error)) (events.ExecResult, *events.Error) {
	start := time.Now()
	st, err := fn(ctx)
	res := events.ExecResult{ProcessID: proc.ID, ExitCode: st.Code, OOMKilled: st.OOMKilled, Signal: st.Signal,
		DurationMS: time.Since(start).Milliseconds()}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		res.TimedOut = true
		if res.Signal == "" {
			res.Signal = "KILL"
		}
		return res, events.Errorf(events.CodeExecutionTimeout, "process %s ran past its timeout and was killed", proc.ID)
	case errors.Is(cause, errSandboxKilled):
		if errors.Is(err, events.ErrSandboxOOMKilled) {
			return res, classify(err) // the backend saw why it died: keep that
		}
		return res, events.Errorf(events.CodeSandboxGone, "sandbox %s ended while process %s ran", sb.id, proc.ID)
	case errors.Is(cause, errWorkerShutdown):
		return res, events.Errorf(events.CodeWorkerShutdown, "worker %s shut down while process %s ran; the sandbox is still there", w.cfg.WorkerID, proc.ID)
	case errors.Is(cause, errSignalKill):
		res.Signal = "KILL"
		if res.ExitCode == 0 {
			res.ExitCode = 137
		}
		return res, nil
	case err != nil:
		e := classify(err)
		e.Message = Redact(e.Message, sb.secrets)
		return res, e
	}
	return res, nil
}

// markerSize is what SBX_OUT stores for an exit marker, rounded up.
func markerSize(m *nats.Msg) int64 {
	n := len(m.Subject) + len(m.Data) + 64
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// finishStream flushes a streamed process's output and publishes its exit marker.
func (w *Worker) finishStream(sb *sandbox, pid string, stdout, stderr *streamWriter, res events.ExecResult, e *events.Error, op *opRecord) {
	lastOut, err1 := stdout.Close()
	lastErr, err2 := stderr.Close()
	if err := errors.Join(err1, err2); err != nil && e == nil {
		e = events.Errorf(events.CodeBackendUnavailable, "output could not be stored: %v", err)
	}
	res.Streamed = true
	res.StdoutBytes, res.StderrBytes = stdout.total, stderr.total
	res.Truncated = stdout.truncated || stderr.truncated
	if e == nil && (stdout.shareCut || stderr.shareCut) {
		e = w.shareExceeded(sb)
	}
	res.Err = e
	op.rec.ExitCode = &res.ExitCode
	op.rec.BytesOut = stdout.total + stderr.total
	body, _ := json.Marshal(res)
	m := nats.NewMsg(events.OutputSubject(sb.tenantToken(), sb.id, pid, events.Exit))
	m.Data = body
	m.Header[events.HeaderExitCode] = []string{strconv.Itoa(res.ExitCode)}
	m.Header[events.HeaderLastSeqStdout] = []string{strconv.FormatUint(lastOut, 10)}
	m.Header[events.HeaderLastSeqStderr] = []string{strconv.FormatUint(lastErr, 10)}
	m.Header[events.HeaderMsgID] = []string{sb.id + "-" + pid + "-x"}
	var trunc []string
	if stdout.truncated {
		trunc = append(trunc, events.Stdout)
	}
	if stderr.truncated {
		trunc = append(trunc, events.Stderr)
	}
	if len(trunc) > 0 {
		m.Header[events.HeaderTruncated] = []string{strings.Join(trunc, ",")}
	}
	if e != nil {
		m.Header[events.HeaderServiceErrorCode] = []string{strconv.Itoa(e.Code.Number())}
		m.Header[events.HeaderServiceError] = []string{e.Name + ": " + e.Message}
	}
	// The marker is stored whatever the share, and counted in it.
	w.out.charge(&sb.usage, markerSize(m))
	// Readers wait for the marker: retry it like the output itself (its
	// Nats-Msg-Id makes a repeat harmless).
	if err := publishRetry(w.js, m, w.stopping); err != nil {
		w.log.Error("exit marker not stored", "sandbox_id", sb.id, "process_id", pid, slog.Any("err", err))
	}
	op.close(e)
}

func (w *Worker) handleSignal(sb *sandbox, r *events.SignalRequest) (any, *events.Error) {
	sb.mu.Lock()
	p := sb.procs[r.ProcessID]
	sb.mu.Unlock()
	if p == nil {
		return nil, events.Errorf(events.CodeProcessNotFound, "no running process %s in sandbox %s", r.ProcessID, sb.id)
	}
	if r.Signal == "KILL" {
		p.cancel(errSignalKill)
		return events.OKReply{OK: true}, nil
	}
	s, ok := w.backend.(Signaller)
	if !ok {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s cannot deliver %s; only KILL", w.info.Name, r.Signal)
	}
	ctx, cancel := context.WithTimeout(detached(), 10*time.Second)
	defer cancel()
	if err := s.Signal(ctx, sb.id, r.ProcessID, r.Signal); err != nil {
		return nil, classify(err)
	}
	return events.OKReply{OK: true}, nil
}

func (w *Worker) handleStdin(sb *sandbox, r *events.StdinRequest) (any, *events.Error) {
	sb.mu.Lock()
	p := sb.procs[r.ProcessID]
	sb.mu.Unlock()
	if p == nil {
		return nil, events.Errorf(events.CodeProcessNotFound, "no running process %s in sandbox %s", r.ProcessID, sb.id)
	}
	if p.stdin == nil {
		return nil, events.Errorf(events.CodeInvalidValue, "process %s was not started with keep_stdin_open", r.ProcessID).With("field", "process_id")
	}
	data, _ := r.DataBytes()
	if len(data) > 0 {
		if e := p.sendStdin(data); e != nil {
			return nil, e
		}
	}
	if r.Close {
		p.closeStdin()
	}
	return events.OKReply{OK: true}, nil
}

func (w *Worker) handleRunCode(sb *sandbox, env cemsg.Envelope, r *events.RunCodeRequest) (any, *events.Error) {
	cr, ok := w.backend.(CodeRunner)
	if !ok {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s cannot run code", w.info.Name)
	}
	if r.ContextID != "" && !w.info.Capabilities.Has(events.CapStatefulCode) {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s has no stateful code contexts", w.info.Name).With("field", "context_id")
	}
	pid := r.ProcessID
	if pid == "" {
		pid = events.NewID()
	}
	_, ctx, done, e := w.startProcess(sb, pid, time.Duration(r.TimeoutMS)*time.Millisecond, false)
	if e != nil {
		return nil, e
	}
	defer done()
	lang := r.Language
	if lang == "" {
		lang = "python"
	}
	op, aerr := w.openOp(detached(), events.OpRunCode, env.ID, sb.id, sb.record.Owner, env.Traceparent, sb.redaction(),
		map[string]string{"language": lang, "process_id": pid, "code_bytes": strconv.Itoa(len(r.Code))})
	if aerr != nil {
		return nil, aerr
	}
	stdout := &cappedBuffer{limit: events.DefaultBufferedOutputCap}
	stderr := &cappedBuffer{limit: events.DefaultBufferedOutputCap}
	var cres CodeResult
	res, e := w.runProcess(ctx, sb, Process{ID: pid}, func(ctx context.Context) (ExitStatus, error) {
		var err error
		cres, err = cr.RunCode(ctx, sb.id, CodeRequest{ProcessID: pid, Language: lang, Code: r.Code, ContextID: r.ContextID, Stdout: stdout, Stderr: stderr})
		return cres.ExitStatus, err
	})
	fillOutput(&res, stdout, stderr)
	op.rec.ExitCode = &res.ExitCode
	op.close(e)
	if e != nil {
		if e.Code == events.CodeExecutionTimeout {
			return nil, e.With("result", res)
		}
		return nil, e
	}
	return events.RunCodeReply{ExecResult: res, Results: cres.Results, Error: cres.Error}, nil
}
