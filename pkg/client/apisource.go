package client

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The API output path, for callers without the services account's
// JetStream (tenants): the live copy of the output (sbx.live.<tenant>.…)
// is followed from before the replay is asked for, the router replays what
// SBX_OUT holds (attach, to sbx.replay.<tenant>.<nonce>), and the two are
// merged by Sbx-Seq per stream: each chunk once, in order, the exit marker
// last. A gap on the live path, or a reconnect, asks for the replay again
// before any gap is reported.

const (
	// subPendingMsgs and subPendingBytes bound what nats.go buffers per
	// subscription while the reader is behind (beyond: slow consumer, and
	// the loss shows as a gap that a replay refills).
	subPendingMsgs  = 1 << 20
	subPendingBytes = 256 << 20
	// attachRetry spaces attempts to re-attach; attachGiveUp attempts in a
	// row that find no router end the replay (gaps are then reported).
	attachRetry = 500 * time.Millisecond
	// maxHeldBytes bounds the live output held while a replay catches up;
	// beyond it the live subscription is not read until the replay ends.
	maxHeldBytes = 64 << 20
	attachGiveUp = 20
	// replayStall is how long a replay may bring nothing before it is
	// asked for again (a router that stopped in the middle of it).
	replayStall = 10 * time.Second
)

var errStopped = errors.New("client: output reading stopped")

type replayMsg struct {
	gen int
	m   *nats.Msg
}

type apiSource struct {
	c                        *Client
	ctx                      context.Context
	tenant, sandbox, process string

	liveCh   chan *nats.Msg
	replayCh chan replayMsg
	done     chan struct{}
	stopOnce sync.Once

	subMu     sync.Mutex
	live      *nats.Subscription
	replaySub *nats.Subscription
	stopped   bool

	// Owned by the reader (next and attach run on its goroutine).
	gen         int  // the current replay; older ones are ignored
	replaying   bool // a replay is asked for or under way: hold gaps
	needAttach  bool
	unsupported bool // the router has no attach op: live only
	failures    int
	lastTry     time.Time
	replayAt    time.Time // the last sign of life of the current replay
	reconnects  uint64
	want        map[string]uint64
	held        map[string]map[uint64]outputMsg
	heldBytes   int // of held: past maxHeldBytes live output waits in nats.go
	exit        *outputMsg
	exitSeen    bool
	ready       []outputMsg
	loss        *events.Error
	stored      int // messages the last replay started with (AttachReply.Stored)
}

// newAPISource subscribes to the live output of one process.
func (c *Client) newAPISource(ctx context.Context, tenant, sandbox, process string) (*apiSource, error) {
	s := &apiSource{c: c, ctx: ctx, tenant: tenant, sandbox: sandbox, process: process,
		liveCh: make(chan *nats.Msg, 256), replayCh: make(chan replayMsg, 256), done: make(chan struct{}),
		reconnects: c.nc.Stats().Reconnects, replaying: true,
		want: map[string]uint64{events.Stdout: 1, events.Stderr: 1}, held: map[string]map[uint64]outputMsg{}}
	// A caller without a tenant (open deployment, services account) may
	// follow any tenant's sandbox: sandbox ids are unique.
	liveToken := tenant
	if tenant == events.TenantOpen {
		liveToken = "*"
	}
	sub, err := c.nc.Subscribe(events.LiveFilter(liveToken, sandbox, process), func(m *nats.Msg) {
		select {
		case s.liveCh <- m:
		case <-s.done:
		}
	})
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "subscribe to live output: %v", err)
	}
	_ = sub.SetPendingLimits(subPendingMsgs, subPendingBytes)
	s.live = sub
	return s, nil
}

// attach asks the router to replay the process's stored output to a new
// nonce's replay subject, subscribed to first.
func (s *apiSource) attach(ctx context.Context) error {
	s.lastTry = time.Now()
	gen := s.gen + 1
	nonce := events.NewID()
	sub, err := s.c.nc.Subscribe(events.ReplaySubject(s.tenant, nonce), func(m *nats.Msg) {
		select {
		case s.replayCh <- replayMsg{gen: gen, m: m}:
		case <-s.done:
		}
	})
	if err != nil {
		return events.Errorf(events.CodeBackendUnavailable, "subscribe to replay: %v", err)
	}
	_ = sub.SetPendingLimits(subPendingMsgs, subPendingBytes)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var r events.AttachReply
	err = s.c.call(actx, events.OpAttach, events.AttachRequest{SandboxID: s.sandbox, ProcessID: s.process, Nonce: nonce}, &r)
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	s.subMu.Lock()
	old, stopped := s.replaySub, s.stopped
	s.replaySub = sub
	s.subMu.Unlock()
	if old != nil {
		_ = old.Unsubscribe()
	}
	if stopped {
		_ = sub.Unsubscribe()
	}
	s.gen, s.replaying, s.needAttach, s.failures = gen, true, false, 0
	s.stored = r.Stored
	s.replayAt = time.Now()
	s.c.log.Debug("output replay requested", "sandbox_id", s.sandbox, "process_id", s.process, "replay", gen, "stored", r.Stored)
	return nil
}

// firstAttach is the attach of Stream and Attach: a router without the
// attach op leaves the live path alone; other errors are the caller's.
func (s *apiSource) firstAttach(ctx context.Context) error {
	err := s.attach(ctx)
	if errors.Is(err, events.ErrUnknownOp) || errors.Is(err, nats.ErrNoResponders) {
		s.c.log.Debug("the router replays no output (no attach op): following live output only",
			"sandbox_id", s.sandbox, "process_id", s.process)
		s.unsupported, s.replaying = true, false
		return nil
	}
	return err
}

// reattach is attach again after a reconnect, a gap or a lost lease:
// transient failures are retried, then given up.
func (s *apiSource) reattach() error {
	err := s.attach(s.ctx)
	if err == nil {
		return nil
	}
	var se *events.Error
	if errors.As(err, &se) && !errors.Is(err, events.ErrBackendUnavailable) && !se.Retryable {
		return err
	}
	if s.failures++; s.failures >= attachGiveUp {
		s.c.log.Warn("no replay after repeated attempts: output gaps, if any, are reported", "sandbox_id", s.sandbox,
			"process_id", s.process, "err", err)
		s.needAttach, s.replaying, s.failures = false, false, 0
		s.flushHeld()
	}
	return nil
}

// schedule asks for a replay at the reader's next turn.
func (s *apiSource) schedule() {
	if s.unsupported {
		return
	}
	s.needAttach, s.replaying = true, true
}

// lostUnlessStored reports err once a new replay has ended without an exit
// marker (the marker may have been stored just before the lease went).
func (s *apiSource) lostUnlessStored(err *events.Error) {
	s.loss = err
	if s.unsupported {
		return
	}
	s.schedule()
}

func (s *apiSource) next(wait time.Duration) (outputMsg, error) {
	s.checkReconnect()
	if m, ok := s.pop(); ok {
		return m, nil // the common case while output flows: no timers
	}
	select {
	case m := <-s.liveReady():
		// A gap here schedules a replay: a reconnect shows as one as soon
		// as output flows again (the ticker below catches a silent one).
		s.take(outputMsg{subject: m.Subject, header: m.Header, data: m.Data})
		if m, ok := s.pop(); ok {
			return m, nil
		}
	default:
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	tick := time.NewTicker(attachRetry / 2)
	defer tick.Stop()
	for {
		if m, ok := s.pop(); ok {
			return m, nil
		}
		if s.loss != nil && !s.replaying && s.exit == nil {
			err := s.loss
			s.loss = nil
			return outputMsg{}, err
		}
		if s.replaying && !s.needAttach && !s.unsupported && time.Since(s.replayAt) > replayStall {
			s.c.log.Debug("output replay stalled: asking again", "sandbox_id", s.sandbox, "process_id", s.process, "replay", s.gen)
			s.schedule()
		}
		if s.needAttach && time.Since(s.lastTry) >= attachRetry {
			if err := s.reattach(); err != nil {
				return outputMsg{}, err
			}
			continue
		}
		select {
		case <-s.done:
			return outputMsg{}, errStopped
		case m := <-s.liveReady():
			s.take(outputMsg{subject: m.Subject, header: m.Header, data: m.Data})
		case r := <-s.replayCh:
			if r.gen != s.gen {
				continue // an abandoned replay
			}
			s.replayAt = time.Now()
			if n := r.m.Header.Get(events.HeaderReplayEnd); n != "" {
				s.c.log.Debug("output replay ended", "sandbox_id", s.sandbox, "process_id", s.process, "replay", r.gen, "sent", n,
					"next_stdout", s.want[events.Stdout], "next_stderr", s.want[events.Stderr], "another_due", s.needAttach)
				s.replayEnded()
				continue
			}
			s.take(outputMsg{subject: r.m.Header.Get(events.HeaderReplaySubject), header: r.m.Header, data: r.m.Data})
		case <-tick.C:
			s.checkReconnect()
		case <-idle.C:
			return outputMsg{}, errIdle
		}
	}
}

// liveReady is the live channel, or nil (never ready) while too much is held.
func (s *apiSource) liveReady() <-chan *nats.Msg {
	if s.heldBytes >= maxHeldBytes {
		return nil
	}
	return s.liveCh
}

// checkReconnect schedules a replay after the connection came back: what
// was published while it was down is in the stream, not on the live path.
func (s *apiSource) checkReconnect() {
	if n := s.c.nc.Stats().Reconnects; n != s.reconnects {
		s.reconnects = n
		s.schedule()
	}
}

// take files one message from either path.
func (s *apiSource) take(m outputMsg) {
	_, _, _, stream, ok := events.ParseOutputSubject(m.subject)
	if !ok {
		return
	}
	if stream == events.Exit {
		if !s.exitSeen {
			s.exit, s.exitSeen = &m, true
		}
		return
	}
	want, known := s.want[stream]
	seq, _ := strconv.ParseUint(m.header.Get(events.HeaderSeq), 10, 64)
	if !known || seq == 0 {
		s.ready = append(s.ready, m)
		return
	}
	switch {
	case seq < want:
		return // a duplicate
	case seq == want:
		s.emit(stream, seq, m)
	default:
		if !s.replaying && !s.unsupported {
			// A gap on the live path (a disconnect, a slow consumer): the
			// stream may hold what is missing.
			if s.c != nil {
				s.c.log.Debug("output gap on the live path: replay", "sandbox_id", s.sandbox, "process_id", s.process,
					"stream", stream, "seq", seq, "want", want)
			}
			s.schedule()
		}
		if !s.replaying {
			s.emit(stream, seq, m) // reported as Missing by Next
			return
		}
		h := s.held[stream]
		if h == nil {
			h = map[uint64]outputMsg{}
			s.held[stream] = h
		}
		if _, dup := h[seq]; !dup {
			h[seq] = m
			s.heldBytes += len(m.data)
		}
	}
}

// emit queues m and whatever held chunks follow it.
func (s *apiSource) emit(stream string, seq uint64, m outputMsg) {
	s.ready = append(s.ready, m)
	s.want[stream] = seq + 1
	h := s.held[stream]
	for {
		n, ok := h[s.want[stream]]
		if !ok {
			break
		}
		delete(h, s.want[stream])
		s.heldBytes -= len(n.data)
		s.ready = append(s.ready, n)
		s.want[stream]++
	}
}

// replayEnded: everything stored has been replayed; what is still missing
// is lost, and the held chunks go out with their gaps.
func (s *apiSource) replayEnded() {
	s.replaying = false
	s.subMu.Lock()
	sub := s.replaySub
	s.replaySub = nil
	s.subMu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if s.needAttach {
		s.replaying = true // another replay is due (a reconnect during this one)
		return
	}
	s.flushHeld()
}

// flushHeld queues the held chunks of each stream in order, gaps and all.
func (s *apiSource) flushHeld() {
	for _, stream := range []string{events.Stdout, events.Stderr} {
		h := s.held[stream]
		for _, seq := range slices.Sorted(maps.Keys(h)) {
			m, ok := h[seq]
			if !ok {
				continue // emitted after an earlier one
			}
			delete(h, seq)
			s.heldBytes -= len(m.data)
			if seq >= s.want[stream] {
				s.emit(stream, seq, m)
			}
		}
	}
}

// pop returns the next message to deliver: queued chunks, then the exit
// marker once no replay can still bring a chunk before it.
func (s *apiSource) pop() (outputMsg, bool) {
	if len(s.ready) == 0 && s.exit != nil && (!s.replaying || s.complete()) {
		s.flushHeld()
		if len(s.ready) == 0 {
			m := *s.exit
			s.exit = nil
			return m, true
		}
	}
	if len(s.ready) == 0 {
		return outputMsg{}, false
	}
	m := s.ready[0]
	s.ready[0] = outputMsg{}
	s.ready = s.ready[1:]
	return m, true
}

// complete: the exit marker's last sequences say every chunk has come.
func (s *apiSource) complete() bool {
	for stream, h := range map[string]string{events.Stdout: events.HeaderLastSeqStdout, events.Stderr: events.HeaderLastSeqStderr} {
		last, err := strconv.ParseUint(s.exit.header.Get(h), 10, 64)
		if err != nil || s.want[stream] <= last {
			return false
		}
	}
	return true
}

func (s *apiSource) stop() {
	s.stopOnce.Do(func() {
		close(s.done)
		s.subMu.Lock()
		s.stopped = true
		live, rep := s.live, s.replaySub
		s.subMu.Unlock()
		_ = live.Unsubscribe()
		if rep != nil {
			_ = rep.Unsubscribe()
		}
	})
}
