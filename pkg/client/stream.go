package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// OutputChunk is one piece of a process's output.
type OutputChunk struct {
	// Stream is events.Stdout or events.Stderr.
	Stream string
	Data   []byte
	// Seq is the chunk's sequence within its stream, from 1.
	Seq uint64
	// Missing counts chunks of this stream lost before this one (retention
	// dropped them before they were read). A gap is reported, never hidden.
	Missing uint64
}

// Process is a streamed process: iterate its output, then Wait.
type Process struct {
	SandboxID string
	ProcessID string

	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	msgs   jetstream.MessagesContext
	next   map[string]uint64

	mu     sync.Mutex
	result *events.ExecResult
	err    error
	done   bool
	closed bool
}

// Stream starts a streamed exec. Read its output with Next or Chunks, then
// call Wait; Close before the exit kills the process. If ctx is cancelled
// the process is killed and reads return context.Canceled.
func (c *Client) Stream(ctx context.Context, req events.ExecRequest) (*Process, error) {
	req.Stream = true
	if req.ProcessID == "" {
		req.ProcessID = events.NewID()
	}
	var reply events.ExecStreamReply
	if err := c.call(ctx, events.OpExec, req, &reply); err != nil {
		if ctx.Err() != nil {
			c.killProcess(req.SandboxID, req.ProcessID)
			return nil, ctx.Err()
		}
		return nil, err
	}
	p, err := c.Attach(ctx, reply.SandboxID, reply.ProcessID)
	if err != nil {
		c.killProcess(req.SandboxID, req.ProcessID)
		return nil, err
	}
	return p, nil
}

// Attach reads a process's output from the beginning of what SBX_OUT still
// holds: late readers and reconnects lose nothing the retention keeps.
func (c *Client) Attach(ctx context.Context, sandboxID, processID string) (*Process, error) {
	if !events.ValidID(sandboxID) || !events.ValidID(processID) {
		return nil, events.Errorf(events.CodeInvalidID, "sandbox and process ids must be valid ids")
	}
	cons, err := c.js.OrderedConsumer(ctx, events.StreamOutput, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OutputFilter(c.tenantToken(), sandboxID, processID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "attach to output: %v", err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxBytes(64 << 20))
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "attach to output: %v", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &Process{SandboxID: sandboxID, ProcessID: processID, c: c, ctx: pctx, cancel: cancel, msgs: msgs,
		next: map[string]uint64{events.Stdout: 1, events.Stderr: 1}}
	// Stop the iterator when the caller's context ends, so Next returns.
	context.AfterFunc(pctx, msgs.Stop)
	return p, nil
}

// Next returns the next chunk, io.EOF after the exit marker, or the
// caller's context error.
func (p *Process) Next() (OutputChunk, error) {
	for {
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			return OutputChunk{}, io.EOF
		}
		p.mu.Unlock()
		m, err := p.msgs.Next(jetstream.NextMaxWait(p.c.idleCheck))
		if errors.Is(err, nats.ErrTimeout) {
			// Quiet for a while: make sure someone will still write the
			// exit marker, so that a lost worker never means a hang.
			if e := p.checkAlive(); e != nil {
				p.mu.Lock()
				p.done, p.err = true, e
				p.mu.Unlock()
				p.msgs.Stop()
				return OutputChunk{}, e
			}
			continue
		}
		if err != nil {
			if cerr := p.ctx.Err(); cerr != nil {
				p.abort()
				if errors.Is(cerr, context.Canceled) {
					return OutputChunk{}, context.Canceled
				}
				return OutputChunk{}, cerr
			}
			return OutputChunk{}, events.Errorf(events.CodeBackendUnavailable, "reading output: %v", err)
		}
		_, _, _, stream, ok := events.ParseOutputSubject(m.Subject())
		if !ok {
			continue
		}
		if stream == events.Exit {
			var res events.ExecResult
			if err := json.Unmarshal(m.Data(), &res); err != nil {
				res.ExitCode, _ = strconv.Atoi(m.Headers().Get(events.HeaderExitCode))
			}
			p.mu.Lock()
			p.result, p.done = &res, true
			if res.Err != nil {
				p.err = res.Err
			}
			p.mu.Unlock()
			p.msgs.Stop()
			return OutputChunk{}, io.EOF
		}
		seq, _ := strconv.ParseUint(m.Headers().Get(events.HeaderSeq), 10, 64)
		want := p.next[stream]
		if seq != 0 && seq < want {
			continue // a duplicate
		}
		chunk := OutputChunk{Stream: stream, Data: m.Data(), Seq: seq}
		if seq > want {
			chunk.Missing = seq - want
		}
		p.next[stream] = seq + 1
		return chunk, nil
	}
}

// checkAlive returns SandboxGone when the process can no longer finish: its
// sandbox ended or its worker's lease is gone. Unknown answers mean alive.
func (p *Process) checkAlive() *events.Error {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	sb, err := p.c.Get(ctx, p.SandboxID)
	if errors.Is(err, events.ErrSandboxNotFound) {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s no longer exists", p.SandboxID)
	}
	if err != nil {
		return nil
	}
	if sb.State.Ended() {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s is %s: %s", p.SandboxID, sb.State, sb.EndReason)
	}
	kv, err := p.c.js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		return nil
	}
	if _, err := kv.Get(ctx, events.WorkerKey(sb.Backend, sb.Worker)); errors.Is(err, jetstream.ErrKeyNotFound) {
		// The exit marker may have landed just before the lease went: the
		// caller's next read finds it if so. Report the loss only when the
		// stream holds no marker.
		if s, serr := p.c.js.Stream(ctx, events.StreamOutput); serr == nil {
			if _, gerr := s.GetLastMsgForSubject(ctx, events.OutputSubject(p.c.tenantToken(), p.SandboxID, p.ProcessID, events.Exit)); gerr == nil {
				return nil
			}
		}
		return events.Errorf(events.CodeSandboxGone, "the worker holding sandbox %s was lost", p.SandboxID)
	}
	return nil
}

// Chunks iterates the output until the exit marker; an error ends it.
func (p *Process) Chunks() iter.Seq2[OutputChunk, error] {
	return func(yield func(OutputChunk, error) bool) {
		for {
			c, err := p.Next()
			if err == io.EOF {
				return
			}
			if !yield(c, err) || err != nil {
				return
			}
		}
	}
}

// Wait reads (and discards) any output not yet read and returns the exit
// result. A timeout gives events.ErrExecutionTimeout with the result.
func (p *Process) Wait() (*events.ExecResult, error) {
	for {
		_, err := p.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.result, p.err
}

// Close stops reading; if the process has not exited it is killed.
func (p *Process) Close() error {
	p.mu.Lock()
	done, closed := p.done, p.closed
	p.closed = true
	p.mu.Unlock()
	if closed {
		return nil
	}
	p.msgs.Stop()
	p.cancel()
	if !done {
		ctx, cancel := context.WithTimeout(context.Background(), p.c.grace)
		defer cancel()
		if err := p.c.Signal(ctx, p.SandboxID, p.ProcessID, "KILL"); err != nil &&
			!errors.Is(err, events.ErrProcessNotFound) && !errors.Is(err, events.ErrSandboxGone) {
			return fmt.Errorf("client: kill process %s: %w", p.ProcessID, err)
		}
	}
	return nil
}

// abort kills the process after the caller's context ended.
func (p *Process) abort() {
	p.mu.Lock()
	done := p.done
	p.done = true
	p.mu.Unlock()
	if !done {
		p.c.killProcess(p.SandboxID, p.ProcessID)
	}
}
