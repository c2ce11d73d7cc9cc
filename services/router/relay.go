package router

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The reply relay (ADR 0001): the router publishes each command to SBX_CMD
// with ce-replyto = <inbox><token>, keeps the client's reply subject under
// the token in a table, and relays the worker's answer — or a coded error
// when the timer fires or the worker's lease ends — exactly once.

// replyRelay is the table of commands waiting for their worker's answer,
// keyed by reply token. It does no I/O: the Service's methods below decide
// what to send.
type replyRelay struct {
	inbox string // prefix of this router's reply subjects: "_SBX.router.<id>."

	mu      sync.Mutex
	pending map[string]*pending
	// closed: close has run (the router is stopping); a command added
	// after it would wait for an answer nobody relays, so add refuses it.
	closed bool
}

func newReplyRelay(inbox string) *replyRelay {
	return &replyRelay{inbox: inbox, pending: make(map[string]*pending)}
}

// subject is the reply subject a worker answers token's command on.
func (r *replyRelay) subject(token string) string { return r.inbox + token }

// token is the token of a reply subject, false for a subject that is not
// one of this relay's.
func (r *replyRelay) token(subject string) (string, bool) {
	if len(subject) <= len(r.inbox) || subject[:len(r.inbox)] != r.inbox {
		return "", false
	}
	return subject[len(r.inbox):], true
}

// add registers p under token; onTimeout runs once timeout passes unless
// take removes p first. It is false, and registers nothing, once close has
// run.
func (r *replyRelay) add(token string, p *pending, timeout time.Duration, onTimeout func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.pending[token] = p
	p.timer = time.AfterFunc(timeout, onTimeout)
	return true
}

// close refuses every later add and takes every pending command, in one
// step: each is returned exactly once, here or by an earlier take.
func (r *replyRelay) close() []*pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	out := make([]*pending, 0, len(r.pending))
	for t, p := range r.pending {
		delete(r.pending, t)
		p.timer.Stop()
		out = append(out, p)
	}
	return out
}

// take removes a pending command (nil: answered or expired already).
func (r *replyRelay) take(token string) *pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[token]
	if p != nil {
		delete(r.pending, token)
		p.timer.Stop()
	}
	return p
}

// peek is the pending command under token, still registered.
func (r *replyRelay) peek(token string) *pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[token]
}

// rearm restarts p's timer if p is still registered under token; false
// when it was answered meanwhile.
func (r *replyRelay) rearm(token string, p *pending, d time.Duration, onTimeout func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[token] != p {
		return false
	}
	p.timer = time.AfterFunc(d, onTimeout)
	return true
}

// tokens lists the tokens of the pending commands match accepts (nil: all).
func (r *replyRelay) tokens(match func(*pending) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.pending))
	for t, p := range r.pending {
		if match == nil || match(p) {
			out = append(out, t)
		}
	}
	return out
}

// len is the number of commands waiting.
func (r *replyRelay) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// pending is a command waiting for its worker's answer.
type pending struct {
	reply     string // the client's reply subject
	op        string
	sandboxID string
	worker    string // <backend>.<worker>, empty for creates in the pool
	timer     *time.Timer
	span      trace.Span
	idem      *idemRef // an idempotent create's key, released if the create fails
	backend   string   // a create's backend (abandonCreate's tombstone)
	createOp  string   // a create's op id (abandonCreate's tombstone)
	specHash  string   // a create's spec hash (abandonCreate's tombstone, ADR 37)

	// Quota accounting of a tenant's command (empty for TenantOpen).
	tenant     string
	reserved   bool       // a create counted by reserveCreate
	execTenant string     // an exec or run_code counted by beginExec
	stream     bool       // a streamed exec: counted until its exit marker
	until      time.Time  // a streamed exec's bound (zero: the sandbox's end)
	extended   bool       // a set_timeout counted by checkExtend
	read       *readGrant // a files.read's reserved storage room (readgrant.go)
	// untilDeadline: an exec bounded only by its sandbox's deadline,
	// which set_timeout may move (the timer is re-armed to the new one).
	untilDeadline bool
	// callerBound: the timer is the caller's own deadline (less a margin),
	// shorter than the command's bound; its answer says so.
	callerBound bool
	// answer, when set, answers the client in place of relaying the
	// worker's successful reply (ports.go); it must not block.
	answer func(msg *nats.Msg)
}

// publishCommand sends a command to SBX_CMD and registers the client's
// reply subject until the worker answers or the timeout fires.
//
// p carries the command's idempotency and quota accounting (nil: none);
// whatever becomes of the command, settle releases them exactly once.
// The reply token is a nuid: unguessable, so that nobody who may publish
// to the router's reply subjects can answer a command it has not seen.
func (s *Service) publishCommand(to, op, subject, workerKey, sandboxID, opID, traceparent string, payload any, timeout time.Duration, p *pending) {
	if p == nil {
		p = &pending{}
	}
	p.reply, p.op, p.sandboxID, p.worker = to, op, sandboxID, workerKey
	span, traceparent := s.startSpan(op, opID, sandboxID, traceparent)
	p.span = span
	data, err := commandData(payload)
	if err != nil {
		endSpan(span, events.CodeInternal)
		s.settle(p, nil, false)
		s.publishReply(to, nil, events.Errorf(events.CodeInternal, "encode command: %v", err))
		return
	}
	token := nuid.Next()
	m, err := cemsg.Encode(subject, cemsg.Envelope{ID: opID, Type: events.CommandType(op), Source: s.source,
		Subject: sandboxID, ReplyTo: s.replies.subject(token), Traceparent: traceparent, Data: data})
	if err == nil {
		// A worker that takes the command after this refuses it: by then
		// the caller may have been told it failed (see queueWindow).
		m.Header.Set(events.HeaderNotAfter, events.FormatNotAfter(time.Now().Add(s.queueWindow(timeout))))
		err = s.sign(m) // the message is complete: workers verify it as is
	}
	if err != nil {
		endSpan(span, events.CodeInternal)
		s.settle(p, nil, false)
		s.publishReply(to, nil, events.Errorf(events.CodeInternal, "encode command: %v", err))
		return
	}
	if !s.replies.add(token, p, timeout, s.onTimeout(token)) {
		endSpan(span, events.CodeBackendUnavailable)
		s.settle(p, nil, false)
		s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "the router is stopping; retry").With("sandbox_id", sandboxID))
		return
	}
	if _, err := s.js.PublishMsgAsync(m); err != nil {
		s.requeue(token, m, err)
	}
}

// commandData is a command's data: a request already checked by the
// handler is forwarded as the client sent it (one decode per request, no
// re-encode); anything else is encoded here.
func commandData(payload any) ([]byte, error) {
	if raw, ok := payload.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(payload)
}

// onTimeout is the timer callback of token's command.
func (s *Service) onTimeout(token string) func() {
	return func() {
		if s.enter() {
			defer s.leave()
			s.expire(token)
		}
	}
}

// finish answers token's client once: with e, or else with the worker's
// reply msg.
func (s *Service) finish(token string, msg *nats.Msg, e *events.Error) {
	p := s.replies.take(token)
	if p == nil {
		return
	}
	if e != nil {
		s.fail(p, e)
		return
	}
	var code events.Code
	if n, err := strconv.Atoi(msg.Header.Get(events.HeaderServiceErrorCode)); err == nil {
		code = events.CodeFromNumber(n)
		if code == events.CodeCommandExpired {
			// A worker refused the command as past its Sbx-Not-After while
			// the router still waits: it was stored only late (its publish
			// re-sent past the deadline, faults.go). The caller gets what
			// the router answers then itself, not queued in time; E1608 is
			// a worker's word to a router that already answered.
			s.fail(p, events.Errorf(events.CodeBackendUnavailable, "command not queued before its deadline to start; no worker will run it"))
			return
		}
		s.releaseIdempotency(p)
	}
	endSpan(p.span, code)
	s.settle(p, msg, code == "")
	if code == events.CodeSandboxExists && p.op == events.OpCreate && p.tenant != "" {
		// Another create claimed the id first: a tenant learns only
		// whether it was its own.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := s.workCtx(5 * time.Second)
			defer cancel()
			sb, ok, err := s.readSandbox(ctx, p.sandboxID)
			if err != nil || !ok || tenantOf(sb) != p.tenant {
				s.publishReply(p.reply, nil, forbidden(p.sandboxID))
				return
			}
			s.relay(p.reply, msg)
		}()
		return
	}
	if p.answer != nil && code == "" {
		p.answer(msg)
		return
	}
	s.relay(p.reply, msg)
}

// fail answers a command taken from the table with e.
func (s *Service) fail(p *pending, e *events.Error) {
	endSpan(p.span, e.Code)
	s.releaseIdempotency(p)
	s.settle(p, nil, false)
	if p.sandboxID != "" {
		e = e.With("sandbox_id", p.sandboxID)
	}
	s.publishReply(p.reply, nil, e)
}

// relay passes a worker's reply to the client.
func (s *Service) relay(to string, msg *nats.Msg) {
	s.outcomes.endMsg(to, msg)
	out := nats.NewMsg(to)
	out.Data = msg.Data
	for _, h := range []string{events.HeaderServiceError, events.HeaderServiceErrorCode} {
		if v := msg.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("relay reply failed", slog.Any("err", err))
	}
}

func (s *Service) onWorkerReply(msg *nats.Msg) {
	if !s.enter() {
		return // stopping: failAllPending answers every caller
	}
	defer s.leave()
	if token, ok := s.replies.token(msg.Subject); ok {
		s.finish(token, msg, nil)
	}
}

func (s *Service) expire(token string) {
	if s.rearm(token) {
		return
	}
	p := s.replies.take(token)
	if p == nil {
		return
	}
	s.settle(p, nil, false)
	var e *events.Error
	if p.op == events.OpCreate {
		s.releaseIdempotency(p)
		s.killAbandoned(p.sandboxID)
		e = events.Errorf(events.CodeCreateTimeout, "no worker finished the create within %s", s.cfg.CreateTimeout)
	} else {
		e = outcomeUnknown(p.op, events.Errorf(events.CodeWorkerTimeout, "the worker did not answer %s in time", p.op))
	}
	endSpan(p.span, e.Code)
	if p.sandboxID != "" {
		e = e.With("sandbox_id", p.sandboxID)
	}
	if p.callerBound {
		e = e.With("caller_deadline", true)
	}
	s.publishReply(p.reply, nil, e)
}

// rearm keeps waiting for an exec bounded by its sandbox's deadline when
// set_timeout has moved that deadline: the exec still runs (and counts
// against its tenant's max_execs) until the new one.
func (s *Service) rearm(token string) bool {
	p := s.replies.peek(token)
	if p == nil || !p.untilDeadline {
		return false
	}
	sb, ok := s.cachedSandbox(p.sandboxID)
	left := time.Until(sb.Deadline) + s.cfg.ReplyMargin
	if !ok || sb.State.Ended() || left <= 0 {
		return false
	}
	s.replies.rearm(token, p, left, s.onTimeout(token)) // false: answered meanwhile
	return true
}

func (s *Service) onPublishError(_ jetstream.JetStream, m *nats.Msg, err error) {
	if !s.enter() {
		return // stopping: failAllPending answers every caller
	}
	defer s.leave()
	token, ok := s.replies.token(m.Header.Get(events.HeaderCEReplyTo))
	if !ok {
		return
	}
	s.requeue(token, m, err)
}

// failWorker answers every command waiting on a worker whose lease ended.
func (s *Service) failWorker(key string) {
	for _, t := range s.replies.tokens(func(p *pending) bool { return p.worker == key }) {
		p := s.replies.peek(t)
		if p == nil {
			continue // answered meanwhile
		}
		s.finish(t, nil, workerLost(p.op, p.sandboxID))
	}
	s.failCreatesOf(key)
}

// failAllPending closes the table (a command published later is refused)
// and answers every command still in it; then it abandons the creates
// among them (abandonCreate), so that what their callers were told,
// failed and retryable, is true.
func (s *Service) failAllPending() {
	left := s.replies.close()
	for _, p := range left {
		s.fail(p, outcomeUnknown(p.op, events.Errorf(events.CodeBackendUnavailable, "router shutting down")))
	}
	for _, p := range left {
		if p.op == events.OpCreate {
			s.abandonCreate(p)
		}
	}
}
