package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Service is one reaper instance.
type Service struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	source string
	active atomic.Bool
	key    *recsign.Key // signs records; its public key is advertised in sbx_reaper
	// advertised is when the advert of key was last written (unix ns).
	advertised atomic.Int64
	advertKV   atomic.Pointer[jetstream.KeyValue] // sbx_reaper, once looked up

	mu       sync.Mutex
	inflight map[string]bool // sandbox ids and worker keys being handled
	// missing is when a sweep first found a worker's lease gone: a sweep
	// marks nothing lost before the lease has been gone for LostGrace, so
	// that a worker restarting with the same id keeps its sandboxes.
	missing map[string]time.Time

	// hook, set only by tests before Run or Sweep, is called at named points
	// (see the hook* constants) with a key (worker key, instance id or "").
	hook func(point, key string)
}

// Points at which Service.hook is called.
const (
	hookActivating  = "activating"   // about to report active
	hookSweepListed = "sweep-listed" // Sweep has its snapshot, before acting on it
	hookLeaseGone   = "lease-gone"   // a lease delete/expiry seen; the grace is armed
	hookWorkerBack  = "worker-back"  // after the grace the lease was back: nothing done
	hookWorkerLost  = "worker-lost"  // after the grace the lease was still gone: handled
)

func (s *Service) at(point, key string) {
	if s.hook != nil {
		s.hook(point, key)
	}
}

// New builds a reaper; it does no I/O until Run or Sweep.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("reaper: nil NATS connection")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.InstanceID == "" {
		cfg.InstanceID = events.NewID()
	}
	key, err := recsign.NewKey(cfg.SigningSeed)
	if err != nil {
		return nil, fmt.Errorf("reaper: signing key: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("reaper: jetstream: %w", err)
	}
	return &Service{cfg: cfg, nc: nc, js: js, key: key, source: "sandboxio/reaper/" + cfg.InstanceID,
		log: cfg.Logger.With("service", "reaper", "instance", cfg.InstanceID), inflight: map[string]bool{}}, nil
}

// SigningKey is the public nkey (U…) this instance signs its records with.
func (s *Service) SigningKey() string { return s.key.Public() }

// Active reports whether this instance is the active reaper.
func (s *Service) Active() bool { return s.active.Load() }

type leaderValue struct {
	Instance  string    `json:"instance"`
	Since     time.Time `json:"since"`
	Heartbeat time.Time `json:"heartbeat"`
}

// LeaderBucketConfig is the sbx_reaper bucket.
func (c Config) LeaderBucketConfig() jetstream.KeyValueConfig {
	c = c.withDefaults()
	return jetstream.KeyValueConfig{Bucket: LeaderBucket, Description: "active reaper lease", History: 1,
		TTL: c.LeaderTTL, LimitMarkerTTL: time.Minute, MaxBytes: 1 << 20, Storage: jetstream.FileStorage, Replicas: max(c.Replicas, 1)}
}

// Run competes for the active role until ctx ends; while active it evicts
// past-deadline sandboxes and handles lost workers. It returns nil when ctx
// ends, after giving up the role (so a standby takes over at once).
func (s *Service) Run(ctx context.Context) error {
	if err := bus.WaitReady(ctx, s.js); err != nil {
		return nil // cancelled before the bus was ready
	}
	var kv jetstream.KeyValue
	for {
		var err error
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err = s.leaderBucket(tctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("leader bucket", slog.Any("err", err))
		if !sleepCtx(ctx, time.Second) {
			return nil
		}
	}
	// Every instance, active or standby, keeps its key advertised while it
	// runs, so that records it signed verify for an auditor started later.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); s.keepAdvertised(ctx) }()
	since := time.Now().UTC()
	for ctx.Err() == nil {
		sent := time.Now()
		val, _ := json.Marshal(leaderValue{Instance: s.cfg.InstanceID, Since: since, Heartbeat: sent.UTC()})
		rev, err := kv.Create(ctx, LeaderKey, val)
		if err == nil {
			s.lead(ctx, kv, rev, sent)
			continue
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			s.log.Debug("take active role", slog.Any("err", err))
		}
		s.standby(ctx, kv)
	}
	return nil
}

// leaderBucket opens sbx_reaper: created or updated to Config.Replicas when
// that is set, else as it is (created with 1 replica when missing). A
// reaper whose credential may not configure streams (ADR 35: the bus's
// owner, `sandboxio bus init`, made the bucket) uses it as it is.
func (s *Service) leaderBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if s.cfg.Replicas > 0 {
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a refused update gets no answer
		kv, err := s.js.CreateOrUpdateKeyValue(uctx, s.cfg.LeaderBucketConfig())
		cancel()
		if err == nil {
			return kv, nil
		}
		s.log.Warn("sbx_reaper not updated to --replicas; using it as it is", slog.Any("err", err))
	}
	return s.advertBucket(ctx)
}

// standby waits until the leader key is deleted or expires, or a third of
// the TTL passes.
func (s *Service) standby(ctx context.Context, kv jetstream.KeyValue) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderTTL/3)
	defer cancel()
	w, err := kv.Watch(wctx, LeaderKey, jetstream.UpdatesOnly())
	if err != nil {
		<-wctx.Done()
		return
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				<-wctx.Done()
				return
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				return
			}
		}
	}
}

// lead runs the active role while the lease is held. written is when the
// write that produced rev was sent: the server started the key's TTL no
// earlier, so written+2/3·TTL is safely before a standby can take the key.
//
// The role is given up (Active false, active work cancelled, then waited
// for) when the revision moved, when ctx ends, or at the refresh deadline
// lastOK+2/3·TTL, whichever comes first; each Update is bounded by that
// deadline, so a hung Update cannot keep the role past it.
func (s *Service) lead(ctx context.Context, kv jetstream.KeyValue, rev uint64, written time.Time) {
	s.log.Info("active")
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.at(hookActivating, s.cfg.InstanceID)
	s.active.Store(true)
	go func() { defer close(done); s.runActive(actx) }()
	stepDown := func() {
		// Stop reporting active and stop acting before waiting for the
		// in-flight work, which cancellation cuts short.
		s.active.Store(false)
		cancel()
		<-done
	}
	since := time.Now().UTC()
	deadlineAfter := func(ok time.Time) time.Time { return ok.Add(s.cfg.LeaderTTL * 2 / 3) }
	deadline := deadlineAfter(written)
	expire := time.NewTimer(time.Until(deadline))
	defer expire.Stop()
	t := time.NewTicker(s.cfg.LeaderTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stepDown()
			// Stepping down is teardown: Run's values, not its cancellation.
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = kv.Delete(dctx, LeaderKey, jetstream.LastRevision(rev))
			dcancel()
			s.log.Info("stepped down", "reason", "shutdown")
			return
		case <-expire.C:
			stepDown()
			s.log.Warn("stepped down", "reason", "cannot refresh lease",
				"last_refresh", deadline.Add(-s.cfg.LeaderTTL*2/3).Format(time.RFC3339Nano))
			return
		case <-t.C:
			sent := time.Now()
			val, _ := json.Marshal(leaderValue{Instance: s.cfg.InstanceID, Since: since, Heartbeat: sent.UTC()})
			uctx, ucancel := context.WithDeadline(ctx, deadline)
			nrev, err := kv.Update(uctx, LeaderKey, val, rev)
			ucancel()
			switch {
			case err == nil:
				rev, deadline = nrev, deadlineAfter(sent)
				expire.Reset(time.Until(deadline))
			case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound):
				stepDown()
				s.log.Warn("stepped down", "reason", "lease taken over or expired", slog.Any("err", err))
				return
			case !time.Now().Before(deadline):
				stepDown()
				s.log.Warn("stepped down", "reason", "cannot refresh lease", slog.Any("err", err))
				return
			default:
				s.log.Debug("refresh lease", slog.Any("err", err))
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// begin marks key in flight; false if it already was.
func (s *Service) begin(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[key] {
		return false
	}
	s.inflight[key] = true
	return true
}

func (s *Service) end(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
}
