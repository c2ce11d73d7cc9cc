package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// publishRecord publishes one phase of an operation record to SBX_OPS,
// exactly as a worker does (binary CloudEvent, ce-id <op_id>-<phase>,
// signed, Nats-Msg-Id recsign.RecordMsgID: an unsigned record published
// first under the ce-id does not have SBX_OPS drop it as a duplicate),
// after making sure the signing key's advert is fresh.
func (s *Service) publishRecord(ctx context.Context, rec events.OpRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("reaper: encode record: %w", err)
	}
	typ := events.TypeOpOpened
	if rec.Phase == events.EventClosed {
		typ = events.TypeOpClosed
	}
	m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
		ID: rec.OpID + "-" + rec.Phase, Type: typ, Source: s.source, Subject: rec.SandboxID,
		Traceparent: telemetry.OpTraceparent(rec.OpID), Data: data})
	if err != nil {
		return fmt.Errorf("reaper: record: %w", err)
	}
	if err := s.key.Sign(m); err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	if err := s.advertise(context.WithoutCancel(ctx), false); err != nil {
		// The record still goes out signed: an auditor with a trusted list,
		// or one that saw an earlier advert, verifies it.
		s.log.Warn("advertise signing key", "err", err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.js.PublishMsg(pctx, m, jetstream.WithMsgID(recsign.RecordMsgID(m))); err != nil {
		return fmt.Errorf("reaper: publish record: %w", err)
	}
	return nil
}

// openRecord and closeRecord publish the two phases of a reaper operation.
// The record's worker is recsign.ReaperWorker (who did it, and whose key
// signs it); the sandbox's worker is in the summary.
func (s *Service) openRecord(ctx context.Context, kind string, sb events.Sandbox, summary map[string]string) events.OpRecord {
	if summary == nil {
		summary = map[string]string{}
	}
	summary[recsign.SummaryWorker] = sb.Worker
	rec := events.OpRecord{OpID: events.NewID(), Kind: kind, Phase: events.EventOpened, SandboxID: sb.SandboxID,
		Backend: sb.Backend, Worker: recsign.ReaperWorker, Owner: sb.Owner, StartedAt: time.Now().UTC(), Summary: summary}
	if err := s.publishRecord(ctx, rec); err != nil {
		s.log.Warn("publish record", "kind", kind, "sandbox_id", sb.SandboxID, "err", err)
	}
	return rec
}

func (s *Service) closeRecord(ctx context.Context, rec events.OpRecord, err error) {
	end := time.Now().UTC()
	rec.Phase, rec.EndedAt, rec.DurationMS = events.EventClosed, &end, end.Sub(rec.StartedAt).Milliseconds()
	rec.Outcome = events.OutcomeOK
	if err != nil {
		e := events.AsError(err)
		rec.Outcome, rec.ErrorCode, rec.Error = events.OutcomeError, e.Code, e.Message
	}
	if perr := s.publishRecord(ctx, rec); perr != nil {
		s.log.Warn("publish record", "kind", rec.Kind, "sandbox_id", rec.SandboxID, "err", perr)
	}
}

func (s *Service) registry(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		return nil, fmt.Errorf("reaper: registry: %w", err)
	}
	return kv, nil
}

func (s *Service) workers(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		return nil, fmt.Errorf("reaper: workers: %w", err)
	}
	return kv, nil
}

// leaseAlive reports whether a worker's lease is present.
func (s *Service) leaseAlive(ctx context.Context, backend, worker string) (bool, error) {
	kv, err := s.workers(ctx)
	if err != nil {
		return false, err
	}
	_, err = kv.Get(ctx, events.WorkerKey(backend, worker))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return false, nil
	default:
		return false, fmt.Errorf("reaper: lease %s: %w", events.WorkerKey(backend, worker), err)
	}
}

// kill asks the sandbox's worker to kill it and waits for the reply, recording
// the whole as a reap operation.
func (s *Service) kill(ctx context.Context, sb events.Sandbox, reason string) (err error) {
	rec := s.openRecord(ctx, KindReap, sb, map[string]string{"reason": reason, "deadline": sb.Deadline.UTC().Format(time.RFC3339Nano)})
	defer func() { s.closeRecord(ctx, rec, err) }()

	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("reaper: kill %s: %w", sb.SandboxID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	body, _ := json.Marshal(events.KillRequest{SandboxID: sb.SandboxID})
	id := events.NewID()
	m, err := cemsg.Encode(events.NodeSubject(sb.Backend, sb.Worker, events.Verb(events.OpKill)), cemsg.Envelope{
		ID: id, Type: events.TypeCmdKill, Source: s.source, Subject: sb.SandboxID, ReplyTo: inbox,
		Traceparent: telemetry.OpTraceparent(rec.OpID), Data: body})
	if err == nil {
		err = s.key.Sign(m) // workers with a trusted commanders list run only signed commands
	}
	if err != nil {
		return fmt.Errorf("reaper: kill %s: %w", sb.SandboxID, err)
	}
	kctx, cancel := context.WithTimeout(ctx, s.cfg.KillTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(kctx, m); err != nil {
		return events.Errorf(events.CodeBackendUnavailable, "publish kill for %s: %v", sb.SandboxID, err)
	}
	reply, err := sub.NextMsgWithContext(kctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return events.Errorf(events.CodeWorkerTimeout, "no kill reply for %s from %s within %v", sb.SandboxID, sb.Worker, s.cfg.KillTimeout)
	}
	if e := events.DecodeError(reply.Data); e != nil {
		if errors.Is(e, events.ErrSandboxGone) || errors.Is(e, events.ErrSandboxNotFound) {
			return nil // already gone: nothing left to kill
		}
		return e
	}
	if c := reply.Header.Get(events.HeaderServiceErrorCode); c != "" && c != "0" {
		n, _ := strconv.Atoi(c)
		return events.Errorf(events.CodeFromNumber(n), "%s", reply.Header.Get(events.HeaderServiceError))
	}
	var kr events.KillReply
	if err := json.Unmarshal(reply.Data, &kr); err != nil {
		return events.Errorf(events.CodeBackendError, "unreadable kill reply: %v", err)
	}
	return nil
}

// markLost marks a sandbox lost if it is still live on worker. It reports
// whether it changed the record; a lost record is published when it did.
func (s *Service) markLost(ctx context.Context, id, worker string) (bool, error) {
	kv, err := s.registry(ctx)
	if err != nil {
		return false, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reaper: get %s: %w", id, err)
		}
		var sb events.Sandbox
		if err := json.Unmarshal(e.Value(), &sb); err != nil {
			return false, fmt.Errorf("reaper: decode %s: %w", id, err)
		}
		if sb.State.Ended() || sb.Worker != worker {
			return false, nil
		}
		now := time.Now().UTC()
		sb.State, sb.EndedAt, sb.EndReason = events.StateLost, &now, EndReasonWorkerLost
		val, _ := json.Marshal(sb)
		if _, err := kv.Update(ctx, id, val, e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) { // revision moved: look again
				continue
			}
			return false, fmt.Errorf("reaper: mark %s lost: %w", id, err)
		}
		rec := s.openRecord(ctx, KindLost, sb, map[string]string{"reason": EndReasonWorkerLost})
		s.closeRecord(ctx, rec, nil)
		s.log.Info("sandbox lost", "sandbox_id", id, "worker_id", worker, "backend", sb.Backend)
		return true, nil
	}
	return false, fmt.Errorf("reaper: mark %s lost: registry kept changing", id)
}

// cleanupWorker purges a lost worker's queued commands and deletes its
// consumer.
func (s *Service) cleanupWorker(ctx context.Context, backend, worker string) error {
	st, err := s.js.Stream(ctx, events.StreamCommands)
	if err != nil {
		return fmt.Errorf("reaper: %s: %w", events.StreamCommands, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(events.NodeFilter(backend, worker))); err != nil {
		return fmt.Errorf("reaper: purge commands of %s: %w", events.WorkerKey(backend, worker), err)
	}
	if err := s.js.DeleteConsumer(ctx, events.StreamCommands, events.NodeConsumer(backend, worker)); err != nil &&
		!errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("reaper: delete consumer of %s: %w", events.WorkerKey(backend, worker), err)
	}
	return nil
}

// parseNodeFilter returns backend and worker of sbx.cmd.<b>.node.<w>.>.
func parseNodeFilter(f string) (backend, worker string, ok bool) {
	p := strings.Split(f, ".")
	if len(p) != 6 || p[0] != "sbx" || p[1] != "cmd" || p[3] != "node" || p[5] != ">" {
		return "", "", false
	}
	return p[2], p[4], true
}
