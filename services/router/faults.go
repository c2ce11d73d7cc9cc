package router

import (
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The router's answers when the bus or a worker fails, around the reply
// relay (relay.go): what a caller is told must be true afterwards. A
// command the caller was told failed never runs later (Sbx-Not-After and
// requeue), a create given up on does not leave a sandbox running
// (killAbandoned), and a create whose worker died fails when the lease
// ends, not at CreateTimeout (failWorker).

// queueWindow is how long a command may wait in SBX_CMD before a worker
// takes it: its Sbx-Not-After is the publish time plus this. A create gets
// Config.QueueTimeout (every command: at most its own timeout), so that a
// create taken at the last moment and bounded by the worker's own create
// timeout (60 s by default) still answers within CreateTimeout.
func (s *Service) queueWindow(timeout time.Duration) time.Duration {
	return min(timeout, s.cfg.QueueTimeout)
}

// requeueBackoff paces the re-publication of a command whose ack failed;
// requeueGrace is how long past its Sbx-Not-After the router still tries
// to learn whether it was stored.
const (
	requeueBackoffMin = 100 * time.Millisecond
	requeueBackoffMax = 2 * time.Second
	requeueGrace      = 5 * time.Second
)

// MaxQueueTimeout is the longest Config.QueueTimeout: a command is
// published again until requeueGrace past its Sbx-Not-After (each attempt
// bounded by requeueAttempt), and every one of those publications must fall
// within SBX_CMD's duplicate window (bus.CommandDuplicates, ADR 25).
const MaxQueueTimeout = bus.CommandDuplicates - requeueGrace - requeueAttempt - 10*time.Second

// ErrQueueTimeout refuses a Config.QueueTimeout past MaxQueueTimeout.
var ErrQueueTimeout = errors.New("router: QueueTimeout outlasts what SBX_CMD's duplicate window covers of a command's re-publication")

// requeueAttempt bounds one re-publication.
const requeueAttempt = 2 * time.Second

// requeue handles a command whose publication failed (no ack: a JetStream
// leader election, a lost node, too many pending publishes). The message
// may have been stored anyway, so answering "not queued" at once would be
// a lie a worker could contradict later. Instead it is published again,
// with the same Nats-Msg-Id (JetStream drops a duplicate and says so),
// until it is acknowledged: then the command goes on as usual (a worker
// that takes it past its Sbx-Not-After refuses it, SBX_E1608). Past the
// Sbx-Not-After, a fresh store (not a duplicate) proves that it had not
// been queued, and the caller gets SBX_E1601, retryable; a duplicate means
// it was stored in time, and a worker may have taken it before its
// Sbx-Not-After: the command goes on, since "not queued" would be false.
// Only when the bus stays unreachable until requeueGrace past the
// Sbx-Not-After is the caller told SBX_E1601 without that proof.
// Called with the gate held (enter).
func (s *Service) requeue(token string, m *nats.Msg, cause error) {
	notAfter, ok := events.ParseNotAfter(m.Header.Get(events.HeaderNotAfter))
	if !ok {
		notAfter = time.Now()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cause
		for backoff := requeueBackoffMin; ; backoff = min(2*backoff, requeueBackoffMax) {
			if !s.isPending(token) {
				return // answered or expired meanwhile
			}
			left := time.Until(notAfter)
			if left <= -requeueGrace {
				break
			}
			ctx, cancel := s.workCtx(min(left+requeueGrace, requeueAttempt))
			var ack *jetstream.PubAck
			ack, err = s.js.PublishMsg(ctx, m)
			cancel()
			if err == nil {
				if ack.Duplicate || time.Now().Before(notAfter) {
					return // queued in time: the worker answers
				}
				s.log.Warn("command not queued before its not-after", "op_id", m.Header.Get(events.HeaderCEID))
				s.finish(token, nil, events.Errorf(events.CodeBackendUnavailable, "command not queued before its deadline to start (%v); no worker will run it", cause))
				return
			}
			if s.runCtx.Err() != nil {
				return // stopping: failAllPending answers the caller
			}
			select {
			case <-s.runCtx.Done():
				return
			case <-time.After(min(backoff, max(time.Until(notAfter.Add(requeueGrace)), time.Millisecond))):
			}
		}
		s.log.Warn("command not queued", "op_id", m.Header.Get(events.HeaderCEID), slog.Any("err", err))
		// Without proof either way it may have been stored and run.
		s.finish(token, nil, outcomeUnknown(s.opOf(token), events.Errorf(events.CodeBackendUnavailable, "command not queued: %v", errors.Join(cause, err))))
	}()
}

func (s *Service) isPending(token string) bool {
	return s.replies.peek(token) != nil
}

// opOf is the op of token's pending command ("" once answered).
func (s *Service) opOf(token string) string {
	if p := s.replies.peek(token); p != nil {
		return p.op
	}
	return ""
}

// killAbandoned kills the sandbox of a create the router gave up on, if a
// worker claimed it: the caller was told CreateTimeout, so it must not
// live its lifetime. A create no worker has claimed is refused later by
// its Sbx-Not-After.
func (s *Service) killAbandoned(sandboxID string) {
	if sandboxID == "" {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(5 * time.Second)
		defer cancel()
		sb, ok, err := s.readSandbox(ctx, sandboxID)
		if err != nil || !ok || sb.State.Ended() || sb.Worker == "" {
			return
		}
		s.log.Info("killing the sandbox of a create that timed out", "sandbox_id", sandboxID)
		data, _ := json.Marshal(events.KillRequest{SandboxID: sandboxID})
		s.publishCommand("", events.OpKill, events.NodeSubject(sb.Backend, sb.Worker, events.Verb(events.OpKill)),
			events.WorkerKey(sb.Backend, sb.Worker), sandboxID, events.NewID(), "", json.RawMessage(data), s.cfg.RequestTimeout, nil)
	}()
}

// failCreatesOf answers the creates a lost worker had claimed (their
// registry record names it): the caller learns at once, retryable, instead
// of waiting for CreateTimeout.
func (s *Service) failCreatesOf(key string) {
	var tokens []string
	for _, t := range s.replies.tokens(func(p *pending) bool { return p.op == events.OpCreate && p.worker == "" }) {
		p := s.replies.peek(t)
		if p == nil {
			continue // answered meanwhile
		}
		if sb, ok := s.cachedSandbox(p.sandboxID); ok && events.WorkerKey(sb.Backend, sb.Worker) == key && !sb.State.Ended() {
			tokens = append(tokens, t)
		}
	}
	for _, t := range tokens {
		s.finish(t, nil, events.Errorf(events.CodeWorkerLost, "the worker that took the create was lost before the sandbox was ready; retry"))
	}
}

// drain waits, up to d, until no command is waiting for its worker: a
// stopping router no longer takes requests (micro stopped) but still relays
// the answers of those in flight, so that a rolling restart fails nothing.
func (s *Service) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s.replies.len() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // the answers arrive on the reply subscription
	}
	s.log.Warn("stopping with commands in flight", "drain", d)
}

// abandonCreate makes sure a create the router answers early (it is
// stopping) leaves no sandbox behind: before any worker claims the id, a
// tombstone (state gone) takes the registry key, so that the claim fails
// and the worker answers "killed before it was created"; if a worker has
// claimed it already, it is killed. Synchronous, bounded.
func (s *Service) abandonCreate(p *pending) {
	if p.sandboxID == "" {
		return
	}
	ctx, cancel := s.cleanupCtx(5 * time.Second)
	defer cancel()
	now := time.Now().UTC()
	// The tombstone names the create and its spec: a retry of it (a later
	// op, the same spec) may take the id over; the abandoned command
	// itself never can (ADR 37).
	tomb := events.Sandbox{SandboxID: p.sandboxID, Backend: p.backend, Tenant: p.tenant, State: events.StateGone,
		CreatedAt: now, EndedAt: &now, EndReason: "create abandoned: the router stopped before a worker answered",
		CreateOp: p.createOp, SpecHash: p.specHash}
	b, _ := json.Marshal(tomb)
	_, err := s.registry.Create(ctx, p.sandboxID, b)
	if err == nil {
		return
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		s.log.Warn("create abandoned without a tombstone", "sandbox_id", p.sandboxID, slog.Any("err", err))
		return
	}
	sb, ok, err := s.readSandbox(ctx, p.sandboxID)
	if err != nil || !ok || sb.State.Ended() || sb.Worker == "" {
		return
	}
	data, _ := json.Marshal(events.KillRequest{SandboxID: p.sandboxID})
	m, err := s.killMsg(sb, data)
	if err == nil {
		_, err = s.js.PublishMsg(ctx, m)
	}
	if err != nil {
		s.log.Warn("abandoned create not killed", "sandbox_id", p.sandboxID, slog.Any("err", err))
	}
}

// killMsg is a signed kill command for sb's worker whose answer nobody
// waits for (the router is stopping).
func (s *Service) killMsg(sb events.Sandbox, data []byte) (*nats.Msg, error) {
	m, err := cemsg.Encode(events.NodeSubject(sb.Backend, sb.Worker, events.Verb(events.OpKill)), cemsg.Envelope{
		ID: events.NewID(), Type: events.CommandType(events.OpKill), Source: s.source, Subject: sb.SandboxID, Data: data})
	if err != nil {
		return nil, err
	}
	m.Header.Set(events.HeaderNotAfter, events.FormatNotAfter(time.Now().Add(s.cfg.QueueTimeout)))
	return m, s.sign(m)
}

// restarted reports whether a lease update comes from a new process of the
// same worker id (a restart faster than the lease TTL): its StartedAt moved
// on. Leases without StartedAt tell nothing.
func restarted(prev, cur events.WorkerLease) bool {
	return !prev.StartedAt.IsZero() && !cur.StartedAt.IsZero() && cur.StartedAt.After(prev.StartedAt)
}

// failRestarted answers the commands that were waiting on a worker process
// that has been replaced by a new one with the same id: the old process
// will never answer them, and the lease never lapsed, so failWorker did
// not run. The sandboxes survive (the new process re-adopts them): an exec
// or run_code gets SBX_E1621 ProcessLost (its process went with the old
// worker process, its exit status is unknown; the new worker closes its
// record with the same code), anything else SBX_E1620 WorkerShutdown; both
// retryable only for ops safe to repeat (outcomeUnknown). Creates it had claimed fail as WorkerLost. A new process that
// answers its predecessor's buffered execs itself (AnswersRestarted: it
// re-attaches to them, ADR 18) is left to; the timer stays the backstop.
func (s *Service) failRestarted(key string, cur events.WorkerLease) {
	for _, t := range s.replies.tokens(func(p *pending) bool {
		return p.worker == key && !(cur.AnswersRestarted && p.op == events.OpExec && !p.stream)
	}) {
		p := s.replies.peek(t)
		if p == nil {
			continue // answered meanwhile
		}
		if p.op == events.OpExec || p.op == events.OpRunCode {
			s.finish(t, nil, outcomeUnknown(p.op, events.Errorf(events.CodeProcessLost, "the worker holding the sandbox restarted while the process ran; its exit status is unknown").With("sandbox_id", p.sandboxID)))
			continue
		}
		s.finish(t, nil, outcomeUnknown(p.op, events.Errorf(events.CodeWorkerShutdown, "the worker holding the sandbox restarted while the command ran")))
	}
	s.failCreatesOf(key)
}

// workerLost is the answer to op on a sandbox whose worker's lease ended: a
// kill cannot be delivered but will succeed once the reaper has marked the
// sandbox lost (SBX_E1624, retryable); anything else finds the sandbox
// gone with its worker (SBX_E1204).
func workerLost(op, sandboxID string) *events.Error {
	if op == events.OpKill {
		return events.Errorf(events.CodeKillDeferred, "the worker holding sandbox %s is lost; the reaper marks the sandbox lost and its container is removed: retry the kill", sandboxID).With("sandbox_id", sandboxID)
	}
	return events.Errorf(events.CodeSandboxGone, "the worker holding sandbox %s is gone", sandboxID).With("sandbox_id", sandboxID)
}
