package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Config configures the router.
type Config struct {
	// RouterID names this instance; default: a new id.
	RouterID string
	// Routing is the parsed routing file; default: DefaultRoutingYAML.
	Routing *Routing
	Bus     bus.Config
	// CreateTimeout bounds a create end to end, including queueing; default 90 s.
	CreateTimeout time.Duration
	// DrainTimeout bounds how long a stopping router keeps waiting for its
	// workers' answers to the commands in flight (new requests go to other
	// routers); default 10 s. What is left is answered SBX_E1601, and its
	// creates are abandoned (abandonCreate).
	DrainTimeout time.Duration
	// QueueTimeout bounds how long a create may wait in SBX_CMD before a
	// worker takes it (its Sbx-Not-After); default 30 s. With the worker's
	// own create timeout (60 s) it should not exceed CreateTimeout.
	// At most MaxQueueTimeout.
	QueueTimeout time.Duration
	// RequestTimeout bounds other forwarded ops; default 60 s. A non-streamed
	// exec is bounded by its own timeout_ms (or the sandbox deadline) plus
	// ReplyMargin instead.
	RequestTimeout time.Duration
	// ReplyMargin is added to an exec's own timeout; default 10 s.
	ReplyMargin time.Duration
	Version     string
	Logger      *slog.Logger
	// TracerProvider gives the router a span per forwarded request (a child
	// of the request's traceparent, whose context the command carries to the
	// worker); default: no-op, which forwards the caller's traceparent as is.
	TracerProvider trace.TracerProvider
	// DefaultLimits are the quotas of a tenant whose sbx_tenants record sets
	// none (zero fields: events.DefaultTenantLimits; negative: unlimited).
	// Callers the server did not authenticate as a tenant have no quota.
	DefaultLimits events.TenantLimits
	// MaxResources bounds a create's resources (zero fields:
	// events.DefaultMaxResources).
	MaxResources events.Resources
	// SigningSeed is the user nkey seed (SU…) the router signs every
	// command it publishes to SBX_CMD with (internal/recsign: headers
	// Sbx-Signer / Sbx-Signature over the subject, ce-id and data); workers
	// with worker.Config.TrustedCommandSigners run only signed commands.
	// Default: none, and commands go unsigned: a key made for one instance
	// is published nowhere, so no worker could trust it, and its signature
	// cost every command an Ed25519 signature for nothing (ADR 17). Never
	// logged.
	SigningSeed []byte
	// GatewayURL is the base URL of the ports gateway (services/gateway),
	// e.g. http://127.0.0.1:8480: a published port's path_url is
	// <GatewayURL>/sandboxes/<sandbox>/ports/<port>/. Empty: none given.
	GatewayURL string
	// GatewayDomain is the gateway's wildcard domain, e.g. sbx.localhost:
	// a published port's url is <scheme>://<port>-<sandbox>.<domain>[:port]/
	// with GatewayURL's scheme and port. Empty: none given.
	GatewayDomain string
	// ReservedPorts can never be published (ports.expose answers
	// SBX_E1730), beside the sandbox agent's own.
	ReservedPorts []int
	// PortLinkKey keys the signed links of private ports
	// (internal/portauth.KeySize bytes, shared with the gateways). Empty:
	// no links (ports.token answers SBX_E1734; tokens work as ever).
	// Never logged.
	PortLinkKey []byte
}

func (c Config) withDefaults() (Config, error) {
	if c.RouterID == "" {
		c.RouterID = events.NewID()
	}
	if c.Routing == nil {
		r, err := ParseRouting([]byte(DefaultRoutingYAML))
		if err != nil {
			return c, err
		}
		c.Routing = r
	}
	c.Bus = c.Bus.Defaults()
	if c.CreateTimeout == 0 {
		c.CreateTimeout = 90 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = min(30*time.Second, c.CreateTimeout)
	}
	if c.QueueTimeout > MaxQueueTimeout {
		// requeue's answer ("stored in time") rests on SBX_CMD dropping
		// every later publication of the command as a duplicate.
		return c, fmt.Errorf("%w: %v is longer than %v (the window is %v)", ErrQueueTimeout,
			c.QueueTimeout, MaxQueueTimeout, bus.CommandDuplicates)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.ReplyMargin == 0 {
		c.ReplyMargin = 10 * time.Second
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if err := checkGatewayConfig(c); err != nil {
		return c, err
	}
	return c, nil
}

// Service is a running router.
type Service struct {
	// gate admits work that may start goroutines counted by wg: handlers
	// and reply callbacks hold it read-locked while they run, and shutdown
	// takes it (stopping = true) before wg.Wait, so that no wg.Add can race
	// the Wait (a handler micro had already dispatched when Stop ran).
	gate     sync.RWMutex
	stopping bool

	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	tracer trace.Tracer
	source string
	key    *recsign.Key // signs the commands it publishes (nil: no SigningSeed)

	// outcomes counts calls and their answers for /metrics (metrics.go).
	outcomes *outcomes

	registry       jetstream.KeyValue
	leaseKV        jetstream.KeyValue
	registryStream jetstream.Stream // the bucket's stream, for read-your-writes on list
	idem           jetstream.KeyValue
	// registryRev is the last registry revision the watch has applied.
	registryRev atomic.Uint64
	tenantsKV   jetstream.KeyValue
	files       jetstream.ObjectStore
	store       *storageUse      // what each sandbox and tenant stores in files (storage.go)
	filesLoaded chan struct{}    // closed once the files watch delivered its current objects
	rates       tenantRates      // each tenant's request rate (ratelimit.go)
	outStream   jetstream.Stream // SBX_OUT, for attach replays

	mu        sync.RWMutex
	sandboxes map[string]events.Sandbox      // registry cache, from a watch
	leases    map[string]events.WorkerLease  // <backend>.<worker> -> lease, from a watch
	tenants   map[string]events.TenantRecord // tenant id -> record, from a watch
	live      map[string]*liveUsage          // tenant -> its live sandboxes in the cache

	// qmu guards q; taken before mu when both are needed.
	qmu sync.Mutex
	q   quotaState

	replies *replyRelay // commands waiting for their worker's answer (relay.go)
	// draining: the router is stopping; new requests are answered
	// "stopping, retry" while the answers of those in flight are relayed.
	draining atomic.Bool

	replaySlots chan struct{} // one per replay in progress
	// runCtx is Run's context: every goroutine the router starts works
	// under it (bounded by its own timeout), so that none outlives Run.
	runCtx context.Context

	wmu      sync.Mutex
	watchers map[string]jetstream.KeyWatcher // the current watch of each cache

	wg sync.WaitGroup
}

// idemRef is the idempotency-store entry an idempotent create holds.
type idemRef struct {
	key      string
	revision uint64
}

// New validates the configuration.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !events.ValidID(cfg.RouterID) {
		return nil, fmt.Errorf("router: RouterID %q is not a valid id", cfg.RouterID)
	}
	if nc == nil {
		return nil, errors.New("router: a NATS connection is required")
	}
	var key *recsign.Key
	if len(bytes.TrimSpace(cfg.SigningSeed)) > 0 {
		var err error
		if key, err = recsign.NewKey(cfg.SigningSeed); err != nil {
			if errors.Is(err, recsign.ErrBadSeed) {
				return nil, fmt.Errorf("router: SigningSeed is not a user nkey seed (SU…): %w", err)
			}
			return nil, fmt.Errorf("router: signing key: %w", err)
		}
	}
	cfg.SigningSeed = nil // held by key only
	s := &Service{
		key: key,
		cfg: cfg, nc: nc, log: cfg.Logger.With("service", "router", "router_id", cfg.RouterID),
		tracer:    cfg.TracerProvider.Tracer("github.com/sandboxio/sandboxio/services/router"),
		source:    "sandboxio/router/" + cfg.RouterID,
		replies:   newReplyRelay("_SBX.router." + cfg.RouterID + "."),
		sandboxes: make(map[string]events.Sandbox),
		leases:    make(map[string]events.WorkerLease),
		tenants:   make(map[string]events.TenantRecord),
		live:      make(map[string]*liveUsage),
		q:         newQuotaState(),
		store:     newStorageUse(),

		filesLoaded: make(chan struct{}),

		replaySlots: make(chan struct{}, maxReplays),
		// Until Run sets it.
		runCtx: context.Background(),
	}
	s.outcomes = newOutcomes()
	s.js, err = jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(s.onPublishError), jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	if testHookJetStream != nil {
		s.js = testHookJetStream(s.js)
	}
	return s, nil
}

// initialLoadWait bounds how long Run waits for the registry and tenant
// caches before it serves (a variable for tests).
var initialLoadWait = 30 * time.Second

// testHookRegistryApply, set by tests only, runs before the registry cache
// applies an entry (to hold its initial load).
var testHookRegistryApply func()

// testHookJetStream, set by tests only, wraps the router's JetStream
// context (to lose publish acks).
var testHookJetStream func(jetstream.JetStream) jetstream.JetStream

// SigningKey is the public nkey (U…) this router signs its commands with
// ("": none, Config.SigningSeed is empty).
func (s *Service) SigningKey() string {
	if s.key == nil {
		return ""
	}
	return s.key.Public()
}

// sign signs a complete command with Config.SigningSeed's key, if any.
func (s *Service) sign(m *nats.Msg) error {
	if s.key == nil {
		return nil
	}
	return s.key.Sign(m)
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	err := s.run(ctx)
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a clean shutdown, not a failure
	}
	return err
}

func (s *Service) run(ctx context.Context) error {
	s.runCtx = ctx
	if err := bus.EnsureWithRetry(ctx, s.js, s.cfg.Bus); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	var err error
	if s.registry, err = s.js.KeyValue(ctx, events.BucketRegistry); err != nil {
		return fmt.Errorf("router: registry: %w", err)
	}
	if s.registryStream, err = s.js.Stream(ctx, "KV_"+events.BucketRegistry); err != nil {
		return fmt.Errorf("router: registry stream: %w", err)
	}
	if s.idem, err = s.js.KeyValue(ctx, events.BucketIdempotency); err != nil {
		return fmt.Errorf("router: idempotency: %w", err)
	}
	if s.leaseKV, err = s.js.KeyValue(ctx, events.BucketWorkers); err != nil {
		return fmt.Errorf("router: leases: %w", err)
	}
	if s.tenantsKV, err = s.openTenants(ctx); err != nil {
		return fmt.Errorf("router: tenants: %w", err)
	}
	if s.files, err = s.js.ObjectStore(ctx, events.BucketFiles); err != nil {
		return fmt.Errorf("router: files: %w", err)
	}
	if s.outStream, err = s.js.Stream(ctx, events.StreamOutput); err != nil {
		return fmt.Errorf("router: output stream: %w", err)
	}
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	regReady, tenantsReady := make(chan struct{}), make(chan struct{})
	s.wg.Add(6)
	go func() { defer s.wg.Done(); s.keepWatching(wctx, s.registryWatch(regReady)) }()
	go func() { defer s.wg.Done(); s.keepWatching(wctx, s.leaseWatch()) }()
	go func() { defer s.wg.Done(); s.keepWatching(wctx, s.tenantWatch(tenantsReady)) }()
	go func() { defer s.wg.Done(); s.quotaLoop(wctx) }()
	go func() { defer s.wg.Done(); bus.RunBallast(wctx, s.js, s.log) }()
	go func() { defer s.wg.Done(); s.storageWatch(wctx, regReady) }()
	defer func() {
		stopWatches() // first, or the watch goroutines never end
		s.gate.Lock()
		s.stopping = true
		s.gate.Unlock()
		s.wg.Wait()
	}()
	// Quotas count from the caches: serve once they hold the buckets'
	// current values (bounded: a huge registry must not keep the API down).
	ictx, icancel := context.WithTimeout(ctx, initialLoadWait)
	for _, ch := range []chan struct{}{regReady, tenantsReady} {
		select {
		case <-ch:
		case <-ictx.Done():
		}
	}
	late := ictx.Err() != nil
	icancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if late {
		s.log.Warn("registry or tenant cache still loading; serving anyway", "waited", initialLoadWait)
	}

	replies, err := s.nc.Subscribe(s.replies.inbox+"*", s.onWorkerReply)
	if err != nil {
		return fmt.Errorf("router: subscribe replies: %w", err)
	}
	_ = replies.SetPendingLimits(-1, 256<<20)
	defer func() { _ = replies.Unsubscribe() }()
	// Exit markers end the count of a tenant's streamed exec.
	exits, err := s.nc.Subscribe(events.SubjectLivePrefix+"*.*.*."+events.Exit, func(m *nats.Msg) { s.onExit(m.Subject) })
	if err != nil {
		return fmt.Errorf("router: subscribe exit markers: %w", err)
	}
	_ = exits.SetPendingLimits(-1, 64<<20)
	defer func() { _ = exits.Unsubscribe() }()

	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        events.ServiceName,
		Version:     s.cfg.Version,
		Description: "sandboxio client API, protocol v" + strconv.Itoa(events.ProtocolVersion),
		Metadata:    map[string]string{"protocol_version": strconv.Itoa(events.ProtocolVersion), "router_id": s.cfg.RouterID},
	})
	if err != nil {
		return fmt.Errorf("router: micro: %w", err)
	}
	grp := svc.AddGroup(events.SubjectAPIPrefix)
	for _, op := range events.Ops {
		err := grp.AddEndpoint(events.Verb(op), s.handler(op),
			micro.WithEndpointSubject(op),
			micro.WithEndpointMetadata(map[string]string{"op": op}),
			micro.WithEndpointPendingLimits(-1, 256<<20))
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("router: endpoint %s: %w", op, err)
		}
	}
	s.log.Info("router started", "subjects", events.SubjectAPIPrefix+".>")
	<-ctx.Done()
	s.draining.Store(true)
	// A barrier: taking the gate waits for the handlers that did not see
	// draining; nothing is done under it.
	s.gate.Lock()
	//lint:ignore SA2001 the empty critical section is the barrier
	s.gate.Unlock()
	if err := svc.Stop(); err != nil {
		s.log.Warn("micro stop", slog.Any("err", err))
	}
	s.drain(s.cfg.DrainTimeout)
	s.failAllPending()
	s.log.Info("router stopped")
	return nil
}

// syncRegistry waits until the registry cache has applied every write made
// before the call, so that a list sees the caller's own creates and kills.
func (s *Service) syncRegistry(ctx context.Context) error {
	info, err := s.registryStream.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	for s.registryRev.Load() < last {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond): // the watch is usually microseconds behind
		}
	}
	return nil
}

// liveLease reports whether a worker holds a live lease.
func (s *Service) liveLease(key string) bool {
	s.mu.RLock()
	l, ok := s.leases[key]
	s.mu.RUnlock()
	return ok && time.Since(l.HeartbeatAt) < s.cfg.Bus.LeaseTTL+2*time.Second
}

// refreshLease reads one worker's lease from the bucket into the cache. The
// cache comes from a watch that can trail the bucket (after a reconnect it
// may stall until the client resets it), so a lease the cache thinks is
// missing or stale is checked at the source before anyone is told the
// worker is gone.
func (s *Service) refreshLease(ctx context.Context, key string) bool {
	entry, err := s.leaseKV.Get(ctx, key)
	if err != nil {
		return false
	}
	var l events.WorkerLease
	if json.Unmarshal(entry.Value(), &l) != nil {
		return false
	}
	s.mu.Lock()
	s.leases[key] = l
	s.mu.Unlock()
	return s.liveLease(key)
}

// refreshLeases reads every lease from the bucket into the cache.
func (s *Service) refreshLeases(ctx context.Context) {
	lister, err := s.leaseKV.ListKeys(ctx)
	if err != nil {
		return
	}
	for key := range lister.Keys() {
		s.refreshLease(ctx, key)
	}
}

// lookupSandbox reads the registry cache, falling back to the bucket: the
// cache may trail a create that just finished.
func (s *Service) lookupSandbox(ctx context.Context, id string) (events.Sandbox, bool, error) {
	s.mu.RLock()
	rec, ok := s.sandboxes[id]
	s.mu.RUnlock()
	if ok {
		return rec, true, nil
	}
	return s.readSandbox(ctx, id)
}

// readSandbox reads the record from the bucket itself (get must see the
// latest state, not the cache's).
func (s *Service) readSandbox(ctx context.Context, id string) (events.Sandbox, bool, error) {
	var rec events.Sandbox
	entry, err := s.registry.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return events.Sandbox{}, false, nil
	}
	if err != nil {
		return events.Sandbox{}, false, err
	}
	if json.Unmarshal(entry.Value(), &rec) != nil {
		return events.Sandbox{}, false, fmt.Errorf("registry record of %s is corrupt", id)
	}
	return rec, true, nil
}

// workCtx bounds work the router does for a request, under Run's context:
// it ends when the router stops.
func (s *Service) workCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.runCtx, d)
}

// cleanupCtx bounds cleanup that must finish even while the router stops
// (releasing a key, deleting a replay consumer): Run's values, not its end.
func (s *Service) cleanupCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.runCtx), d)
}

// enter admits work that may start counted goroutines; it is false once the
// router is stopping. A true enter must be followed by leave.
func (s *Service) enter() bool {
	s.gate.RLock()
	if s.stopping {
		s.gate.RUnlock()
		return false
	}
	return true
}

func (s *Service) leave() { s.gate.RUnlock() }
