package dockerworker

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// pyBootstrap is the stateful context's interpreter loop (standard library
// only), run as `python3 -u -c` through the agent.
//
//go:embed pycontext.py
var pyBootstrap string

// Bounds on what a context's interpreter sends back (it is the sandbox's
// code: hostile).
const (
	maxContextLine    = 8 << 20 // one message (a PNG is base64 in it)
	maxContextResults = 64      // rich results per run
	maxContexts       = 16      // per sandbox
	maxKnownContexts  = 4 * maxContexts
	contextStartWait  = 20 * time.Second
)

// pyContext is one stateful interpreter in a sandbox.
type pyContext struct {
	id     string
	run    sync.Mutex // one run at a time
	stdin  *io.PipeWriter
	msgs   chan ctxMsg
	exited chan struct{} // closed when the interpreter process ended
	cancel context.CancelFunc
	signal func(sig int, group bool) error

	mu     sync.Mutex
	stderr io.Writer // the current run's, nil between runs
	err    error     // why it ended
}

type ctxMsg struct {
	Ready  bool               `json:"ready,omitempty"`
	Done   bool               `json:"done,omitempty"`
	Stdout string             `json:"stdout,omitempty"`
	Stderr string             `json:"stderr,omitempty"`
	Result *events.RichResult `json:"result,omitempty"`
	Error  *events.CodeError  `json:"error,omitempty"`
}

// CodeContext implements worker.CodeContexts: create starts a context's
// interpreter (nothing for one that exists), restart starts a fresh one in
// its place, delete ends it. A context that crashed is still known (its
// next run, or a restart, starts it afresh); one never made, or deleted, is
// ContextNotFound to restart and delete.
func (b *Backend) CodeContext(ctx context.Context, sandboxID string, req worker.ContextRequest) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if err := checkContextSandbox(sb, req.Language); err != nil {
		return err
	}
	if req.Action != events.ContextCreate {
		sb.mu.Lock()
		known, pc := sb.ctxKnown[req.ContextID], sb.contexts[req.ContextID]
		if req.Action == events.ContextDelete {
			delete(sb.ctxKnown, req.ContextID)
		}
		sb.mu.Unlock()
		if !known {
			return events.Errorf(events.CodeContextNotFound, "sandbox %s has no code context %s", sb.id, req.ContextID).With("context_id", req.ContextID)
		}
		if pc != nil {
			b.dropContext(sb, pc)
		}
		if req.Action == events.ContextDelete {
			return nil
		}
	}
	_, err = b.context(ctx, sb, req.ContextID)
	return err
}

// checkContextSandbox says whether sb can have a context of lang.
func checkContextSandbox(sb *sandbox, lang string) error {
	switch lang {
	case "", "python", "python3", "py":
	default:
		return events.Errorf(events.CodeInvalidValue, "stateful contexts run python, not %q", lang).With("field", "language")
	}
	if sb.agentOf() == nil {
		return events.Errorf(events.CodeCapabilityNotSupp,
			"stateful code needs the sandbox's agent, which this sandbox does not have").With("capability", string(events.CapStatefulCode))
	}
	return nil
}

// runInContext runs code in the sandbox's context id, starting the
// interpreter on first use.
func (b *Backend) runInContext(ctx context.Context, sb *sandbox, req worker.CodeRequest) (worker.CodeResult, error) {
	if err := checkContextSandbox(sb, req.Language); err != nil {
		return worker.CodeResult{}, err
	}
	pc, err := b.context(ctx, sb, req.ContextID)
	if err != nil {
		return worker.CodeResult{}, err
	}
	pc.run.Lock()
	defer pc.run.Unlock()
	// Drop what the interpreter said between runs (a background thread).
	for len(pc.msgs) > 0 {
		<-pc.msgs
	}
	pc.mu.Lock()
	pc.stderr = discardIfNil(req.Stderr)
	pc.mu.Unlock()
	defer func() {
		pc.mu.Lock()
		pc.stderr = nil
		pc.mu.Unlock()
	}()
	line, _ := json.Marshal(map[string]string{"code": req.Code})
	if _, err := pc.stdin.Write(append(line, '\n')); err != nil {
		return worker.CodeResult{}, b.contextGone(sb, pc)
	}
	var res worker.CodeResult
	interrupted := false
	var grace <-chan time.Time
	wait := ctx.Done()
	for {
		select {
		case m := <-pc.msgs:
			switch {
			case m.Done:
				if interrupted {
					return worker.CodeResult{ExitStatus: worker.ExitStatus{Code: 130, Signal: "INT"}}, ctx.Err()
				}
				if res.Error != nil {
					res.Code = 1
				}
				return res, nil
			case m.Stdout != "":
				if _, err := io.WriteString(discardIfNil(req.Stdout), m.Stdout); err != nil {
					return res, fmt.Errorf("dockerworker: run_code output: %w", err)
				}
			case m.Stderr != "":
				if _, err := io.WriteString(discardIfNil(req.Stderr), m.Stderr); err != nil {
					return res, fmt.Errorf("dockerworker: run_code output: %w", err)
				}
			case m.Result != nil && len(res.Results) < maxContextResults:
				res.Results = append(res.Results, *m.Result)
			case m.Error != nil:
				res.Error = m.Error
			}
		case <-pc.exited:
			return worker.CodeResult{}, b.contextGone(sb, pc)
		case <-wait:
			// Interrupt the code (KeyboardInterrupt); a context that does not
			// come back within the grace is restarted.
			interrupted, wait = true, nil
			if pc.signal != nil {
				_ = pc.signal(int(syscall.SIGINT), false)
			}
			grace = time.After(b.cfg.KillGrace)
		case <-grace:
			b.dropContext(sb, pc)
			return worker.CodeResult{ExitStatus: worker.ExitStatus{Code: 137, Signal: "KILL"}}, ctx.Err()
		}
	}
}

// contextGone drops a context whose interpreter ended.
func (b *Backend) contextGone(sb *sandbox, pc *pyContext) error {
	b.dropContext(sb, pc)
	pc.mu.Lock()
	cause := pc.err
	pc.mu.Unlock()
	if sb.gone.Load() {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s is gone", sb.id)
	}
	msg := "the interpreter ended"
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return events.Errorf(events.CodeContextCrashed, "context %s crashed (%s); the next run starts a fresh one", pc.id, msg).With("context_id", pc.id)
}

func (b *Backend) dropContext(sb *sandbox, pc *pyContext) {
	sb.mu.Lock()
	if sb.contexts[pc.id] == pc {
		delete(sb.contexts, pc.id)
	}
	sb.mu.Unlock()
	pc.cancel()
}

// context returns the sandbox's context id, starting its interpreter.
func (b *Backend) context(ctx context.Context, sb *sandbox, id string) (*pyContext, error) {
	sb.mu.Lock()
	if pc := sb.contexts[id]; pc != nil {
		sb.mu.Unlock()
		return pc, nil
	}
	if len(sb.contexts) >= maxContexts {
		sb.mu.Unlock()
		return nil, events.Errorf(events.CodeQuotaExceeded, "sandbox %s has %d code contexts, the most it may have", sb.id, maxContexts)
	}
	pc := &pyContext{id: id, msgs: make(chan ctxMsg, 64), exited: make(chan struct{})}
	if sb.contexts == nil {
		sb.contexts = map[string]*pyContext{}
	}
	sb.contexts[id] = pc
	if sb.ctxKnown == nil {
		sb.ctxKnown = map[string]bool{}
	}
	if len(sb.ctxKnown) >= maxKnownContexts {
		// Forget crashed ones first: a context id is cheap to make again.
		for k := range sb.ctxKnown {
			if sb.contexts[k] == nil {
				delete(sb.ctxKnown, k)
			}
		}
	}
	sb.ctxKnown[id] = true
	sb.mu.Unlock()

	cl := sb.agentOf()
	if cl == nil {
		b.dropContext(sb, pc)
		return nil, events.Errorf(events.CodeAgentUnavailable, "sandbox %s: its agent is not answering", sb.id)
	}
	pr, pw := io.Pipe()
	pc.stdin = pw
	// The kernel's reader lives as long as the code context, not the call that started it: pc.cancel ends it.
	rctx, cancel := context.WithCancel(context.Background())
	pc.cancel = func() { cancel(); pw.CloseWithError(errors.New("context closed")) }
	started := make(chan struct{})
	out := &lineWriter{max: maxContextLine, line: func(l []byte) error {
		var m ctxMsg
		if err := json.Unmarshal(l, &m); err != nil {
			return fmt.Errorf("context %s: bad message from the interpreter", id)
		}
		if m.Ready {
			close(started)
			return nil
		}
		select {
		case pc.msgs <- m:
			return nil
		case <-rctx.Done():
			return rctx.Err()
		}
	}}
	stderr := writerFunc(func(p []byte) (int, error) {
		pc.mu.Lock()
		w := pc.stderr
		pc.mu.Unlock()
		if w != nil {
			_, _ = w.Write(p)
		}
		return len(p), nil
	})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(pc.exited)
		env := append([]string{}, sb.env...)
		env = append(env, "MPLBACKEND=Agg", "PYTHONUNBUFFERED=1")
		_, err := cl.Exec(rctx, agentExecRequest(pyBootstrap, env, pr, out, stderr, func(s func(int, bool) error) {
			pc.mu.Lock()
			pc.signal = s
			pc.mu.Unlock()
		}, b.cfg.KillGrace))
		pc.mu.Lock()
		pc.err = err
		pc.mu.Unlock()
		if err != nil && rctx.Err() == nil {
			b.log.Debug("code context ended", "sandbox", sb.id, "context", id, slog.Any("err", err))
		}
	}()
	select {
	case <-started:
		return pc, nil
	case <-pc.exited:
		b.dropContext(sb, pc)
		pc.mu.Lock()
		err := pc.err
		pc.mu.Unlock()
		if errors.Is(err, events.ErrExecFailed) || err == nil {
			return nil, events.Errorf(events.CodeExecFailed, "context %s: python3 did not start in this image", id).With("cmd0", "python3")
		}
		return nil, b.agentFailed(ctx, sb, err)
	case <-time.After(contextStartWait):
		b.dropContext(sb, pc)
		return nil, events.Errorf(events.CodeContextCrashed, "context %s: the interpreter did not start within %s", id, contextStartWait)
	case <-ctx.Done():
		b.dropContext(sb, pc)
		return nil, ctx.Err()
	}
}

// closeContexts ends every context of a sandbox (it is being killed).
func (b *Backend) closeContexts(sb *sandbox) {
	sb.mu.Lock()
	list := sb.contexts
	sb.contexts = nil
	sb.mu.Unlock()
	for _, pc := range list {
		pc.cancel()
	}
}

// lineWriter splits a byte stream into lines of at most max bytes.
type lineWriter struct {
	max  int
	buf  bytes.Buffer
	line func([]byte) error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if w.buf.Len()+len(p) > w.max {
				return 0, fmt.Errorf("a message of more than %d bytes", w.max)
			}
			w.buf.Write(p)
			break
		}
		if w.buf.Len()+i > w.max {
			return 0, fmt.Errorf("a message of more than %d bytes", w.max)
		}
		w.buf.Write(p[:i])
		if err := w.line(w.buf.Bytes()); err != nil {
			return 0, err
		}
		w.buf.Reset()
		p = p[i+1:]
	}
	return n, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func agentExecRequest(code string, env []string, stdin io.Reader, stdout, stderr io.Writer,
	started func(func(int, bool) error), grace time.Duration) agent.ExecRequest {
	return agent.ExecRequest{Argv: []string{"python3", "-u", "-c", code}, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr,
		Started: func(s agent.Signaller) { started(s) }, KillGrace: grace}
}
