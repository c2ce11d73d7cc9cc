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
	src    outputSource
	next   map[string]uint64

	mu     sync.Mutex
	result *events.ExecResult
	err    error
	done   bool
	closed bool
}

// outputMsg is one stored output message: its output subject
// (sbx.out.… or sbx.live.…), headers and body.
type outputMsg struct {
	subject string
	header  nats.Header
	data    []byte
}

// outputSource delivers a process's output messages, each stream in Sbx-Seq
// order and the exit marker last. next returns errIdle when nothing came
// for wait.
type outputSource interface {
	next(wait time.Duration) (outputMsg, error)
	stop()
}

var errIdle = errors.New("client: output idle")

// Stream starts a streamed exec. Read its output with Next or Chunks, then
// call Wait; Close before the exit kills the process. If ctx is cancelled
// the process is killed and reads return context.Canceled. It takes the
// wire request (timeout in milliseconds); Sandbox.Stream takes
// ExecOptions with a time.Duration.
func (c *Client) Stream(ctx context.Context, req events.ExecRequest) (*Process, error) {
	req.Stream = true
	if req.ProcessID == "" {
		req.ProcessID = events.NewID()
	}
	sess := c.session(ctx)
	var src *apiSource
	if sess.api && events.ValidID(req.SandboxID) && events.ValidID(req.ProcessID) {
		// Follow the live copy before the process starts: nothing it writes
		// is missed, and attach only fills what a disconnect loses.
		var err error
		if src, err = c.newAPISource(ctx, sess.tenant, req.SandboxID, req.ProcessID); err != nil {
			return nil, err
		}
	}
	var reply events.ExecStreamReply
	if err := c.call(ctx, events.OpExec, req, &reply); err != nil {
		if src != nil {
			src.stop()
		}
		if ctx.Err() != nil || errors.Is(err, events.ErrReplyLost) || errors.Is(err, context.DeadlineExceeded) {
			c.killProcess(req.SandboxID, req.ProcessID)
			return nil, gaveUpWith(ctx, err)
		}
		return nil, err
	}
	var p *Process
	var err error
	if src != nil {
		// The live path has been followed since before the start: a router
		// that cannot replay right now only delays the gap check.
		if aerr := src.firstAttach(ctx); aerr != nil {
			var se *events.Error
			if !errors.As(aerr, &se) || !se.Retryable {
				src.stop()
				c.killProcess(req.SandboxID, req.ProcessID)
				return nil, aerr
			}
			src.schedule()
		}
		p = c.newProcess(ctx, src.sandbox, src.process, src)
	} else {
		// The exec's reply is the proof the process exists: Attach's check
		// (an empty stdin write, refused with SBX_E1007 to a process whose
		// stdin is not open, and counted by the router as an error) is for
		// a process this caller did not start.
		p, err = c.followStream(ctx, reply.SandboxID, reply.ProcessID)
	}
	if err != nil {
		c.killProcess(req.SandboxID, req.ProcessID)
		return nil, err
	}
	return p, nil
}

// Attach reads a process's output from the beginning of what SBX_OUT still
// holds: late readers and reconnects lose nothing the retention keeps. On an
// open deployment it reads SBX_OUT with an ordered consumer; a tenant, who
// has no JetStream, follows the live subjects and has the router replay the
// stored output (the attach op), merged by Sbx-Seq.
func (c *Client) Attach(ctx context.Context, sandboxID, processID string) (*Process, error) {
	if !events.ValidID(sandboxID) || !events.ValidID(processID) {
		return nil, events.Errorf(events.CodeInvalidID, "sandbox and process ids must be valid ids")
	}
	sess := c.session(ctx)
	if sess.api {
		src, err := c.newAPISource(ctx, sess.tenant, sandboxID, processID)
		if err != nil {
			return nil, err
		}
		p, err := c.attachAPI(ctx, src)
		if err == nil && !src.unsupported {
			if err = c.checkAttachable(ctx, sandboxID, processID, c.storedViaRouter(sandboxID, processID, src.stored > 0)); err != nil {
				src.stop() // no process to kill: only stop reading
				p.cancel()
				return nil, err
			}
		}
		return p, err
	}
	if err := c.checkAttachable(ctx, sandboxID, processID, c.storedInStream(sandboxID, processID)); err != nil {
		return nil, err
	}
	return c.followStream(ctx, sandboxID, processID)
}

// followStream reads a process's output from SBX_OUT from its start.
func (c *Client) followStream(ctx context.Context, sandboxID, processID string) (*Process, error) {
	if !events.ValidID(sandboxID) || !events.ValidID(processID) {
		return nil, events.Errorf(events.CodeInvalidID, "sandbox and process ids must be valid ids")
	}
	cons, err := c.js.OrderedConsumer(ctx, events.StreamOutput, jetstream.OrderedConsumerConfig{
		// Any tenant token: a caller with the services account's JetStream
		// (open deployment, operator) may read any sandbox's output, and
		// sandbox ids are unique.
		FilterSubjects: []string{events.OutputFilter("*", sandboxID, processID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		if ctx.Err() != nil { // cancelled, never an SBX code
			return nil, ctx.Err()
		}
		return nil, events.Errorf(events.CodeBackendUnavailable, "attach to output: %v", err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxBytes(64 << 20))
	if err != nil {
		if ctx.Err() != nil { // cancelled, never an SBX code
			return nil, ctx.Err()
		}
		return nil, events.Errorf(events.CodeBackendUnavailable, "attach to output: %v", err)
	}
	return c.newProcess(ctx, sandboxID, processID, jsSource{msgs}), nil
}

// attachAPI asks for the replay of src's process and wraps it.
func (c *Client) attachAPI(ctx context.Context, src *apiSource) (*Process, error) {
	if err := src.firstAttach(ctx); err != nil {
		src.stop()
		return nil, err
	}
	return c.newProcess(ctx, src.sandbox, src.process, src), nil
}

func (c *Client) newProcess(ctx context.Context, sandboxID, processID string, src outputSource) *Process {
	pctx, cancel := context.WithCancel(ctx)
	p := &Process{SandboxID: sandboxID, ProcessID: processID, c: c, ctx: pctx, cancel: cancel, src: src,
		next: map[string]uint64{events.Stdout: 1, events.Stderr: 1}}
	// Stop the source when the caller's context ends, so Next returns.
	context.AfterFunc(pctx, src.stop)
	if a, ok := src.(*apiSource); ok {
		a.ctx = pctx
	}
	return p
}

// jsSource reads SBX_OUT with an ordered consumer.
type jsSource struct{ msgs jetstream.MessagesContext }

func (s jsSource) next(wait time.Duration) (outputMsg, error) {
	m, err := s.msgs.Next(jetstream.NextMaxWait(wait))
	if errors.Is(err, nats.ErrTimeout) {
		return outputMsg{}, errIdle
	}
	if err != nil {
		return outputMsg{}, err
	}
	return outputMsg{subject: m.Subject(), header: m.Headers(), data: m.Data()}, nil
}

func (s jsSource) stop() { s.msgs.Stop() }

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
		m, err := p.src.next(p.c.idleCheck)
		if errors.Is(err, errIdle) {
			// Quiet for a while: make sure someone will still write the
			// exit marker, so that a lost worker never means a hang.
			if e := p.checkAlive(); e != nil {
				p.mu.Lock()
				p.done, p.err = true, e
				p.mu.Unlock()
				p.src.stop()
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
			var se *events.Error
			if errors.As(err, &se) {
				p.mu.Lock()
				p.done, p.err = true, se
				p.mu.Unlock()
				p.src.stop()
				return OutputChunk{}, se
			}
			return OutputChunk{}, events.Errorf(events.CodeBackendUnavailable, "reading output: %v", err)
		}
		_, _, _, stream, ok := events.ParseOutputSubject(m.subject)
		if !ok {
			continue
		}
		if stream == events.Exit {
			var res events.ExecResult
			if err := json.Unmarshal(m.data, &res); err != nil {
				res.ExitCode, _ = strconv.Atoi(m.header.Get(events.HeaderExitCode))
			}
			p.mu.Lock()
			p.result, p.done = &res, true
			if res.Err != nil {
				p.err = res.Err
			} else if gap := p.lostTail(m.header); gap != nil {
				p.err = gap
			}
			p.mu.Unlock()
			p.src.stop()
			return OutputChunk{}, io.EOF
		}
		seq, _ := strconv.ParseUint(m.header.Get(events.HeaderSeq), 10, 64)
		want := p.next[stream]
		if seq != 0 && seq < want {
			continue // a duplicate
		}
		chunk := OutputChunk{Stream: stream, Data: m.data, Seq: seq}
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
	if errors.Is(err, events.ErrSandboxNotFound) || errors.Is(err, events.ErrForbidden) {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s no longer exists", p.SandboxID)
	}
	if err != nil {
		return nil
	}
	if sb.State.Ended() {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s is %s: %s", p.SandboxID, sb.State, sb.EndReason)
	}
	lost := events.Errorf(events.CodeSandboxGone, "the worker holding sandbox %s was lost", p.SandboxID)
	if a, ok := p.src.(*apiSource); ok {
		// No KV for tenants: the router's backends view lists the live
		// leases. If the worker's is gone, replay once more: the exit
		// marker may have landed just before the lease went.
		b, err := p.c.Backends(ctx)
		if err != nil || leaseListed(b, sb.Backend, sb.Worker) {
			return nil
		}
		a.lostUnlessStored(lost)
		return nil
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
			if _, gerr := s.GetLastMsgForSubject(ctx, events.OutputSubject(tenantOf(sb), p.SandboxID, p.ProcessID, events.Exit)); gerr == nil {
				return nil
			}
		}
		return lost
	}
	return nil
}

// tenantOf is the tenant token of a sandbox's subjects.
func tenantOf(sb *events.Sandbox) string {
	if events.ValidTenant(sb.Tenant) {
		return sb.Tenant
	}
	return events.TenantOpen
}

// leaseListed reports whether backends lists worker's lease under backend.
func leaseListed(b *events.BackendsReply, backend, worker string) bool {
	for _, info := range b.Backends {
		if info.Name != backend {
			continue
		}
		for _, w := range info.Workers {
			if w.Worker == worker {
				return true
			}
		}
	}
	return false
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
	p.src.stop()
	p.cancel()
	if !done {
		// The teardown grace: Close kills the process whatever ended the caller's context.
		ctx, cancel := context.WithTimeout(context.Background(), p.c.grace)
		defer cancel()
		if err := p.c.Signal(ctx, p.SandboxID, p.ProcessID, "KILL"); err != nil &&
			!errors.Is(err, events.ErrProcessNotFound) && !errors.Is(err, events.ErrSandboxGone) {
			return fmt.Errorf("client: kill process %s: %w", p.ProcessID, err)
		}
	}
	return nil
}

// Detach stops reading and leaves the process running, until it exits, its
// own timeout or the sandbox's end; Attach follows it again. Give Stream a
// context that outlives the reader (context.WithoutCancel) for the process
// to survive the reader's going away: a cancelled Stream context kills it.
func (p *Process) Detach() {
	p.mu.Lock()
	closed := p.closed
	p.closed, p.done = true, true
	p.mu.Unlock()
	if closed {
		return
	}
	p.src.stop()
	p.cancel()
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

// lostTail is OutputGap when the exit marker says a stream had chunks
// after the last one read (its Sbx-Last-Seq-*): a lost tail has no later
// chunk to carry Missing, so Wait reports it. p.mu is held.
func (p *Process) lostTail(h nats.Header) *events.Error {
	for stream, key := range map[string]string{events.Stdout: events.HeaderLastSeqStdout, events.Stderr: events.HeaderLastSeqStderr} {
		last, err := strconv.ParseUint(h.Get(key), 10, 64)
		if err != nil || last == 0 {
			continue
		}
		if read := p.next[stream]; read <= last {
			if read == 0 {
				read = 1
			}
			return events.Errorf(events.CodeOutputGap, "%d chunk(s) at the end of %s were lost to retention before they were read", last-read+1, stream).
				With("stream", stream).With("last_seq", last)
		}
	}
	return nil
}
