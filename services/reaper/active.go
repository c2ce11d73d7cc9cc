package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// tracked is a live sandbox the evictor holds a timer for.
type tracked struct {
	sb    events.Sandbox
	timer *time.Timer
}

// runActive is the active role: registry and lease watches, deadline timers,
// the periodic sweep. It returns when ctx ends, after its goroutines.
func (s *Service) runActive(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	goTask := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}

	due := make(chan string, 256)
	lost := make(chan [2]string, 64)
	sandboxes := map[string]*tracked{}
	// Leases seen deleted or expired, waiting out Config.LostGrace.
	graces := map[string]*time.Timer{}
	defer func() {
		for _, t := range sandboxes {
			t.timer.Stop()
		}
		for _, t := range graces {
			t.Stop()
		}
	}()

	regUpdates, stopReg := s.watch(ctx, events.BucketRegistry)
	defer stopReg()
	leaseUpdates, stopLeases := s.watch(ctx, events.BucketWorkers)
	defer stopLeases()

	sweeping := make(chan struct{}, 1)
	sweep := func() {
		select {
		case sweeping <- struct{}{}:
		default:
			return // one at a time
		}
		goTask(func() {
			defer func() { <-sweeping }()
			rep, err := s.sweep(ctx, false, true)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("sweep", slog.Any("err", err))
				}
				return
			}
			if len(rep.Findings) > 0 {
				s.log.Info("sweep", "findings", len(rep.Findings), "errors", rep.Errors())
			}
		})
	}
	sweep()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			sweep()
		case e, ok := <-regUpdates:
			if !ok {
				regUpdates, stopReg = s.rewatch(ctx, events.BucketRegistry, stopReg)
				continue
			}
			s.track(ctx, sandboxes, e, due)
		case e, ok := <-leaseUpdates:
			if !ok {
				leaseUpdates, stopLeases = s.rewatch(ctx, events.BucketWorkers, stopLeases)
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				continue
			}
			b, w, ok := strings.Cut(e.Key(), ".")
			if !ok {
				continue
			}
			// A worker restarted with the same id within the grace keeps its
			// sandboxes: act only if the lease is still gone once the grace
			// has passed since it last disappeared.
			key := e.Key()
			if g := graces[key]; g != nil {
				g.Stop()
			}
			graces[key] = time.AfterFunc(s.cfg.LostGrace, func() {
				select {
				case lost <- [2]string{b, w}:
				case <-ctx.Done():
				}
			})
			s.log.Debug("lease gone; waiting out the grace", "backend", b, "worker_id", w, "grace", s.cfg.LostGrace.String())
			s.at(hookLeaseGone, key)
		case id := <-due:
			t, ok := sandboxes[id]
			if !ok {
				continue
			}
			sb := t.sb
			if !s.begin(sb.SandboxID) {
				continue
			}
			goTask(func() {
				defer s.end(sb.SandboxID)
				s.evict(ctx, sb)
			})
		case bw := <-lost:
			delete(graces, events.WorkerKey(bw[0], bw[1]))
			key := "worker:" + events.WorkerKey(bw[0], bw[1])
			if !s.begin(key) {
				continue
			}
			var ids []string
			for id, t := range sandboxes {
				if t.sb.Backend == bw[0] && t.sb.Worker == bw[1] {
					ids = append(ids, id)
				}
			}
			goTask(func() {
				defer s.end(key)
				s.workerLost(ctx, bw[0], bw[1], ids)
			})
		}
	}
}

// watch starts a KV watch; the channel carries entries (never the
// end-of-initial-values nil) and closes when the watch ends.
func (s *Service) watch(ctx context.Context, bucket string) (<-chan jetstream.KeyValueEntry, func()) {
	out := make(chan jetstream.KeyValueEntry)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		kv, err := s.js.KeyValue(wctx, bucket)
		if err != nil {
			s.log.Warn("watch", "bucket", bucket, slog.Any("err", err))
			sleepCtx(wctx, time.Second)
			return
		}
		w, err := kv.WatchAll(wctx)
		if err != nil {
			s.log.Warn("watch", "bucket", bucket, slog.Any("err", err))
			sleepCtx(wctx, time.Second)
			return
		}
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-wctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				select {
				case out <- e:
				case <-wctx.Done():
					return
				}
			}
		}
	}()
	return out, func() { cancel(); <-done }
}

func (s *Service) rewatch(ctx context.Context, bucket string, stop func()) (<-chan jetstream.KeyValueEntry, func()) {
	stop()
	if ctx.Err() != nil {
		ch := make(chan jetstream.KeyValueEntry)
		return ch, func() {}
	}
	return s.watch(ctx, bucket)
}

// track updates the evictor's view from one registry entry.
func (s *Service) track(ctx context.Context, m map[string]*tracked, e jetstream.KeyValueEntry, due chan<- string) {
	id := e.Key()
	var sb events.Sandbox
	live := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &sb) == nil &&
		sb.State != "" && !sb.State.Ended()
	t := m[id]
	if !live {
		if t != nil {
			t.timer.Stop()
			delete(m, id)
		}
		return
	}
	if sb.SandboxID == "" {
		sb.SandboxID = id
	}
	if t != nil {
		t.timer.Stop()
	}
	if sb.Deadline.IsZero() {
		// No deadline: the sweep's lost-worker rule still covers it.
		m[id] = &tracked{sb: sb, timer: time.NewTimer(time.Duration(1<<63 - 1))}
		return
	}
	fire := func() {
		select {
		case due <- id:
		case <-ctx.Done():
		}
	}
	m[id] = &tracked{sb: sb, timer: time.AfterFunc(time.Until(sb.Deadline), fire)}
}

// Outcomes of reapDue.
const (
	reapEnded    = "skipped: ended meanwhile"
	reapNotDue   = "skipped: deadline moved"
	reapNotStuck = "skipped: no longer creating"
	reapLost     = "marked lost"
	reapNotLive  = "skipped: no longer live on this worker"
	reapKilled   = "killed"
)

// reapDue re-reads a sandbox that was seen past its deadline and acts on
// the current record: nothing if it has ended or its deadline (set_timeout)
// has not passed; marked lost if its worker's lease is gone; else killed.
// It returns what it did.
func (s *Service) reapDue(ctx context.Context, id string) (string, error) {
	reg, err := s.registry(ctx)
	if err != nil {
		return "", err
	}
	e, err := reg.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return reapEnded, nil
	}
	if err != nil {
		return "", fmt.Errorf("reaper: get %s: %w", id, err)
	}
	var cur events.Sandbox
	if err := json.Unmarshal(e.Value(), &cur); err != nil {
		return "", fmt.Errorf("reaper: decode %s: %w", id, err)
	}
	if cur.State == "" || cur.State.Ended() {
		return reapEnded, nil
	}
	if cur.State == events.StatePaused {
		return s.expirePaused(ctx, id) // its retention (durable.go)
	}
	if cur.Deadline.IsZero() || time.Now().Before(cur.Deadline) {
		return reapNotDue, nil
	}
	if cur.SandboxID == "" {
		cur.SandboxID = id
	}
	alive, err := s.leaseAlive(ctx, cur.Backend, cur.Worker)
	if err != nil {
		return "", err
	}
	if !alive {
		changed, err := s.markLost(ctx, cur.SandboxID, cur.Worker)
		if err != nil {
			return "", err
		}
		if !changed {
			return reapNotLive, nil
		}
		return reapLost, nil
	}
	if err := s.kill(ctx, cur, "deadline"); err != nil {
		return "", err
	}
	s.log.Info("killed past deadline", "sandbox_id", cur.SandboxID, "worker_id", cur.Worker,
		"late", time.Since(cur.Deadline).Round(time.Millisecond).String())
	return reapKilled, nil
}

// evict handles a sandbox whose deadline timer fired.
func (s *Service) evict(ctx context.Context, sb events.Sandbox) {
	if _, err := s.reapDue(ctx, sb.SandboxID); err != nil && ctx.Err() == nil {
		s.log.Warn("evict", "sandbox_id", sb.SandboxID, "worker_id", sb.Worker, slog.Any("err", err))
	}
}

// workerLost handles a lease that was deleted or expired, once the grace
// has passed. The lease is checked again right before each change, so a
// worker that came back (same id) keeps its sandboxes, queued commands and
// consumer.
func (s *Service) workerLost(ctx context.Context, backend, worker string, ids []string) {
	key := events.WorkerKey(backend, worker)
	gone := func() bool {
		alive, err := s.leaseAlive(ctx, backend, worker)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("worker lost: check lease; the sweep will look again", "worker_id", worker, slog.Any("err", err))
			}
			return false
		}
		if alive {
			s.log.Info("worker back within the grace", "backend", backend, "worker_id", worker)
		}
		return !alive
	}
	if !gone() {
		s.at(hookWorkerBack, key)
		return
	}
	s.log.Info("worker lost", "backend", backend, "worker_id", worker, "sandboxes", len(ids))
	for _, id := range ids {
		if !gone() {
			s.at(hookWorkerBack, key)
			return
		}
		if _, err := s.markLost(ctx, id, worker); err != nil {
			s.log.Warn("mark lost", "sandbox_id", id, slog.Any("err", err))
		}
	}
	if !gone() {
		s.at(hookWorkerBack, key)
		return
	}
	if err := s.cleanupWorker(ctx, backend, worker); err != nil {
		s.log.Warn("clean up worker", "worker_id", worker, slog.Any("err", err))
	}
	s.at(hookWorkerLost, key)
}

// reapStuck kills a sandbox still creating StuckCreate after its claim,
// if its record still says so; the kill is a reap record like a deadline's.
func (s *Service) reapStuck(ctx context.Context, id string) (string, error) {
	reg, err := s.registry(ctx)
	if err != nil {
		return "", err
	}
	e, err := reg.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return reapEnded, nil
	}
	if err != nil {
		return "", fmt.Errorf("reaper: get %s: %w", id, err)
	}
	var cur events.Sandbox
	if err := json.Unmarshal(e.Value(), &cur); err != nil {
		return "", fmt.Errorf("reaper: decode %s: %w", id, err)
	}
	if cur.State != events.StateCreating {
		return reapNotStuck, nil
	}
	if cur.SandboxID == "" {
		cur.SandboxID = id
	}
	if err := s.kill(ctx, cur, "stuck in creating"); err != nil {
		return "", err
	}
	s.log.Info("killed a sandbox stuck in creating", "sandbox_id", cur.SandboxID, "worker_id", cur.Worker,
		"since", time.Since(cur.CreatedAt).Round(time.Second).String())
	return reapKilled, nil
}
