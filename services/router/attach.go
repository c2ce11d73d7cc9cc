package router

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/pkg/events"
)

const (
	// maxReplays bounds the replays one router runs at once; more are
	// refused with SBX_E1604 Overloaded.
	maxReplays = 64
	// replayTimeout bounds one replay end to end.
	replayTimeout = 2 * time.Minute
	// replayFlushBytes paces a replay: the router flushes its connection
	// every so many bytes, so that a large replay does not outrun the
	// server's buffers for the receiver.
	replayFlushBytes = 256 << 10
	replayBatch      = 64
)

// attach replays the stored output of one process to the caller's replay
// subject, after the ownership check. The reply (AttachReply) comes first,
// with Stored = the messages SBX_OUT holds for the process when the replay
// starts; then each of them, in stream order, with its own headers and
// Sbx-Subject; then an empty message with Sbx-Replay-End: <count sent>.
// Output stored after the start is not replayed: the caller has it live.
func (s *Service) attach(req micro.Request, c caller, r *events.AttachRequest) {
	select {
	case s.replaySlots <- struct{}{}:
	default:
		respondError(req, events.Errorf(events.CodeOverloaded, "this router runs %d replays already", maxReplays).With("limit", maxReplays))
		return
	}
	to := req.Reply()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.replaySlots }()
		ctx, cancel := context.WithTimeout(s.runCtx, replayTimeout)
		defer cancel()
		sb, e := s.authorize(ctx, c, r.SandboxID)
		if e != nil {
			s.publishReply(to, nil, e)
			return
		}
		s.replay(ctx, to, c, sb, r)
	}()
}

func (s *Service) replay(ctx context.Context, to string, c caller, sb events.Sandbox, r *events.AttachRequest) {
	tenant := tenantOf(sb)
	subject := events.ReplaySubject(c.tenant, r.Nonce)
	reply := events.AttachReply{SandboxID: sb.SandboxID, ProcessID: r.ProcessID, Replay: subject,
		Subjects: events.StreamSubjectsFor(tenant, sb.SandboxID, r.ProcessID)}
	cons, err := s.outStream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: events.OutputFilter(tenant, sb.SandboxID, r.ProcessID),
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: 30 * time.Second, MemoryStorage: true, Replicas: 1,
	})
	if err != nil {
		s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "output stream: %v", err))
		return
	}
	defer func() {
		dctx, cancel := s.cleanupCtx(5 * time.Second)
		defer cancel()
		if err := s.outStream.DeleteConsumer(dctx, cons.CachedInfo().Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.log.Debug("replay consumer not deleted (it expires by itself)", slog.Any("err", err))
		}
	}()
	reply.Stored = int(cons.CachedInfo().NumPending)
	b, _ := json.Marshal(reply)
	s.publishReply(to, b, nil)

	sent, unflushed := 0, 0
	for sent < reply.Stored && ctx.Err() == nil {
		wait := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			wait = max(time.Until(dl), time.Millisecond)
		}
		batch, err := cons.Fetch(min(replayBatch, reply.Stored-sent), jetstream.FetchMaxWait(wait))
		if err != nil {
			s.log.Warn("replay fetch failed", slog.Any("err", err), "sandbox_id", sb.SandboxID)
			break
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			m := nats.NewMsg(subject)
			for k, v := range msg.Headers() {
				m.Header[k] = v
			}
			m.Header.Set(events.HeaderReplaySubject, msg.Subject())
			m.Data = msg.Data()
			if err := s.nc.PublishMsg(m); err != nil {
				s.log.Warn("replay publish failed", slog.Any("err", err), "sandbox_id", sb.SandboxID)
				break
			}
			sent++
			if unflushed += len(m.Data) + 256; unflushed >= replayFlushBytes {
				unflushed = 0
				if err := s.nc.FlushWithContext(ctx); err != nil {
					break
				}
			}
		}
		if got == 0 {
			// Nothing within the wait: retention removed what was left.
			if info, err := cons.Info(ctx); err != nil || info.NumPending == 0 {
				break
			}
		}
	}
	end := nats.NewMsg(subject)
	end.Header.Set(events.HeaderReplayEnd, strconv.Itoa(sent))
	if err := s.nc.PublishMsg(end); err != nil {
		s.log.Warn("replay end not sent", slog.Any("err", err))
	}
	fctx, cancel := s.cleanupCtx(5 * time.Second)
	defer cancel()
	_ = s.nc.FlushWithContext(fctx)
}
