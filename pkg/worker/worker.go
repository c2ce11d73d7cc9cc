package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// poolMaxDeliver bounds how often a create is offered to the pool (a full
// worker naks it back).
const poolMaxDeliver = 20

// Audit policies.
const (
	AuditWarn = "warn"
	AuditFail = "fail"
)

// Config configures a Worker. Zero values take the defaults noted.
type Config struct {
	// WorkerID names this worker on the bus (ValidID); default: a new id.
	WorkerID string
	// Host is the machine the worker runs on, advertised in the lease.
	Host    string
	Version string
	// Capacity bounds concurrent operations (creates, execs, file ops); default 256.
	Capacity int
	// QueueWait is how long a command waits for a free slot before it is
	// refused with the retryable SBX_E1604 Overloaded; default 5 s.
	QueueWait time.Duration
	// CreateTimeout bounds Backend.Create (SBX_E1203); default 60 s.
	CreateTimeout time.Duration
	// KillTimeout bounds Backend.Kill; default 30 s.
	KillTimeout time.Duration
	// HeartbeatInterval refreshes the lease; default a third of Bus.LeaseTTL.
	HeartbeatInterval time.Duration
	Bus               bus.Config
	// ChunkSize is the largest output chunk; default 128 KiB.
	ChunkSize int
	// FlushInterval bounds how long output waits to be coalesced; default 5 ms.
	FlushInterval time.Duration
	// PublishWindow bounds unacknowledged output chunks per stream; default 32.
	PublishWindow int
	// AuditPolicy is "warn" (default) or "fail"; AuditTimeout (default 2 s)
	// bounds how long an operation waits for its record to be stored.
	AuditPolicy  string
	AuditTimeout time.Duration
	// ReconcileInterval is how often the worker looks for sandboxes the
	// backend holds but the worker does not track (default 1 min), and
	// CreationGrace how old such an orphan must be before it is removed
	// (default 30 s).
	ReconcileInterval time.Duration
	CreationGrace     time.Duration
	// KillOnShutdown kills every sandbox of this worker when Run returns
	// (the all-in-one dev mode); otherwise sandboxes outlive a restart and are
	// re-adopted.
	KillOnShutdown bool
	// ShutdownGrace bounds how long Run waits, once its context ends, for
	// the operations in flight (an exec without timeout_ms may run for the
	// sandbox's whole life). Past it, the processes still running are
	// stopped and their callers get the retryable SBX_E1620 WorkerShutdown;
	// the sandboxes survive (unless KillOnShutdown). Default 10 s.
	ShutdownGrace time.Duration
	// SealSeed is the xkey seed (SX…) that opens secrets sealed to this
	// backend; every worker of a backend shares it. Default: a new key for
	// this process (fine for one worker per backend).
	SealSeed []byte
	// SigningSeed is the nkey seed (SU…) this worker signs its records
	// with; its public key is in the lease. Default: a new key.
	SigningSeed []byte
	// TrustedCommandSigners are the public nkeys (U…) whose signature a
	// command must carry (internal/recsign, over the command's subject,
	// ce-id and data): the router's and the reaper's. A command signed by
	// no key of the list is refused with SBX_E1401 and never runs. Empty
	// (open deployments): unsigned commands are accepted.
	TrustedCommandSigners []string
	// CommandScopes narrows what a trusted command signer may command:
	// signer (U…) → the operations (events.Op…) its commands may ask for.
	// A signer not in the map may command every operation; a command
	// outside its signer's scope is refused with SBX_E1402 and never
	// runs. The reaper's key is scoped to kill (auth.ReadCommandScopes
	// reads keys/command-scopes.txt).
	CommandScopes map[string][]string
	// ReservedPorts are ports of a sandbox that no connection reaches
	// (SBX_E1730 PortReserved), whatever its registry record publishes:
	// the operator's reserved ports (the router's ReservedPorts), checked
	// again where the port is dialled.
	ReservedPorts []int
	// MaxResources and MaxLifetime bound what a create command may ask for,
	// whoever published it; zero fields take events.DefaultMaxResources and
	// events.MaxLifetimeSeconds.
	MaxResources events.Resources
	MaxLifetime  time.Duration
	// Containment limits (limits.go; 0 takes the Default* value):
	// MaxFileReadBytes bounds one files.read by the file's size (SBX_E1702),
	// MaxFileWriteBytes one files.write (SBX_E1703), MaxSandboxObjectBytes
	// what one sandbox's reads store in sbx_files within its TTL
	// (SBX_E1704), MaxOutputLimit an exec's output_limit (SBX_E1705) and
	// MaxSandboxOutputBytes one sandbox's share of SBX_OUT (SBX_E1706).
	MaxFileReadBytes      int64
	MaxFileWriteBytes     int64
	MaxSandboxObjectBytes int64
	MaxOutputLimit        int64
	MaxSandboxOutputBytes int64
	// OutputBudgetBytes is how much of SBX_OUT this worker's live
	// sandboxes may hold together; each sandbox's share is also at most
	// this divided by their number (limits.go, outputLedger). 0 takes 7/8 of
	// the stream's MaxBytes, right for one worker per bus: with several,
	// give each its part. Negative: no budget (the per-sandbox share only).
	OutputBudgetBytes int64
	// MaxTenantOutputBytes is a tenant's share of SBX_OUT when its
	// sbx_tenants record sets no max_output_bytes: the output of all its
	// sandboxes together, departed ones' included while the stream holds
	// it (SBX_E1706, details.quota max_output_bytes). 0 takes
	// events.DefaultTenantLimits; negative: no tenant share. With an
	// OutputBudgetBytes below the default budget, each worker grants a
	// tenant the same part of its share (ADR 44).
	MaxTenantOutputBytes int64
	// Meter receives the worker's metrics (records waiting to be stored,
	// retried, lost); nil records nothing.
	Meter  metric.Meter
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.WorkerID == "" {
		c.WorkerID = events.NewID()
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Capacity == 0 {
		c.Capacity = 256
	}
	if c.QueueWait == 0 {
		c.QueueWait = 5 * time.Second
	}
	if c.CreateTimeout == 0 {
		c.CreateTimeout = 60 * time.Second
	}
	if c.KillTimeout == 0 {
		c.KillTimeout = 30 * time.Second
	}
	c.Bus = c.Bus.Defaults()
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Bus.LeaseTTL / 3
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 128 << 10
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 5 * time.Millisecond
	}
	if c.PublishWindow == 0 {
		c.PublishWindow = 32
	}
	if c.AuditPolicy == "" {
		c.AuditPolicy = AuditWarn
	}
	if c.AuditTimeout == 0 {
		c.AuditTimeout = 2 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Minute
	}
	if c.CreationGrace == 0 {
		c.CreationGrace = 30 * time.Second
	}
	c.MaxResources = c.MaxResources.OrDefaults(events.DefaultMaxResources)
	if c.MaxLifetime == 0 {
		c.MaxLifetime = events.MaxLifetimeSeconds * time.Second
	}
	if c.Meter == nil {
		c.Meter = noop.NewMeterProvider().Meter("sandboxio/worker")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.WorkerID != "" && !events.ValidID(c.WorkerID) {
		return fmt.Errorf("worker: WorkerID %q is not a valid id", c.WorkerID)
	}
	if c.WorkerID == recsign.ReaperWorker {
		return fmt.Errorf("worker: WorkerID %q is the reaper's (the worker of its records)", c.WorkerID)
	}
	if c.AuditPolicy != "" && c.AuditPolicy != AuditWarn && c.AuditPolicy != AuditFail {
		return fmt.Errorf("worker: AuditPolicy %q: want warn or fail", c.AuditPolicy)
	}
	if r := c.MaxResources; r.CPUs < 0 || r.MemoryMB < 0 || r.PIDs < 0 || r.DiskMB < 0 {
		return errors.New("worker: MaxResources must not be negative")
	}
	if c.MaxLifetime < 0 || c.MaxLifetime > events.MaxLifetimeSeconds*time.Second {
		return fmt.Errorf("worker: MaxLifetime %s is outside 0..%ds", c.MaxLifetime, events.MaxLifetimeSeconds)
	}
	for _, k := range c.TrustedCommandSigners {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("worker: TrustedCommandSigners: %q is not a public user nkey (U…)", truncate(k))
		}
	}
	for k := range c.CommandScopes {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("worker: CommandScopes: %q is not a public user nkey (U…)", truncate(k))
		}
	}
	if c.ChunkSize > bus.MaxOutputChunk {
		return fmt.Errorf("worker: ChunkSize %d exceeds %d", c.ChunkSize, bus.MaxOutputChunk)
	}
	return nil
}

// Worker connects a Backend to the bus.
type Worker struct {
	dur      durables // pauses and snapshots (durable.go)
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	backend  Backend
	info     Info
	runtimes map[string]events.IsolationTier
	metrics  workerMetrics
	keys     keys
	log      *slog.Logger
	source   string

	registry jetstream.KeyValue
	leases   jetstream.KeyValue
	files    jetstream.ObjectStore

	slots      chan struct{}
	goroutines tracked // every goroutine the worker starts (tracked.go)
	// stopping is closed when Run's context ends: record retries give up.
	stopping chan struct{}
	// started is when Run began: operations opened before it are a
	// predecessor's (same worker id).
	started time.Time
	// timersOff is set once Run stops the deadline timers: none is armed again.
	timersOff atomic.Bool

	consumers consumers
	records   *recordQueue
	batch     recordBatch // records signed and published together (ADR 17)
	// unsettled counts the records handed over for storing (in a batch
	// window, published or waiting for a retry) whose ack has not come and
	// that are not yet counted lost.
	unsettled atomic.Int64
	lanes     lanes
	// out accounts the live sandboxes' output in SBX_OUT; savingUsage is
	// set while saveUsages runs.
	out         outputLedger
	tenants     tenantLimits // tenants' max_output_bytes (tenantoutput.go)
	savingUsage atomic.Bool

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	// claiming counts the creates of each id between their registry claim
	// and their track: such a claim is this process's, not orphaned.
	claiming map[string]int
}

// New checks the configuration and the backend; Run does the I/O.
func New(cfg Config, nc *nats.Conn, backend Backend) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if nc == nil || backend == nil {
		return nil, errors.New("worker: a NATS connection and a backend are required")
	}
	info := backend.Info()
	if !events.ValidID(info.Name) {
		return nil, fmt.Errorf("worker: backend name %q is not a valid id", info.Name)
	}
	// A lost publish ack must not hold an exec (or shutdown) forever: async
	// publishes time out and are retried synchronously (output.go).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	var runtimes map[string]events.IsolationTier
	if rt, ok := backend.(RuntimeTiers); ok {
		runtimes = rt.RuntimeTiers()
	}
	k, err := newKeys(cfg.SealSeed, cfg.SigningSeed)
	if err != nil {
		return nil, err
	}
	cfg.SealSeed, cfg.SigningSeed = nil, nil // held by k only
	w := &Worker{
		cfg: cfg, nc: nc, js: js, backend: backend, info: info, runtimes: runtimes, keys: k,
		log:       cfg.Logger.With("service", "worker", "backend", info.Name, "worker_id", cfg.WorkerID),
		source:    "sandboxio/worker/" + info.Name + "/" + cfg.WorkerID,
		slots:     make(chan struct{}, cfg.Capacity),
		stopping:  make(chan struct{}),
		sandboxes: make(map[string]*sandbox),
		claiming:  make(map[string]int),
		consumers: consumers{lost: make(chan struct{}, 1)},
		records:   newRecordQueue(),
	}
	// The pending gauge reads the worker's own count (RecordsUnsettled).
	if w.metrics, err = newWorkerMetrics(cfg.Meter, w.unsettled.Load); err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	return w, nil
}

// ID is the worker's id on the bus.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// SealKey is the public xkey (X…) secrets for this worker's backend are
// sealed to; it is in the lease.
func (w *Worker) SealKey() string { return w.keys.sealPub }

// SigningKey is the public nkey (U…) this worker signs its records with; it
// is in the lease.
func (w *Worker) SigningKey() string { return w.keys.signPub }

// Run serves until ctx ends, then stops taking commands, waits for the
// operations in flight, withdraws the lease and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	err := w.run(ctx)
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a clean shutdown, not a failure
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	w.started = time.Now().UTC()
	go w.records.run(w)
	defer w.records.close() // last: after every operation has ended
	defer w.batch.close(w)  // before: the last batch goes into the queue
	if err := bus.EnsureWithRetry(ctx, w.js, w.cfg.Bus); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	var err error
	if w.registry, err = w.js.KeyValue(ctx, events.BucketRegistry); err != nil {
		return fmt.Errorf("worker: registry: %w", err)
	}
	if w.leases, err = w.js.KeyValue(ctx, events.BucketWorkers); err != nil {
		return fmt.Errorf("worker: leases: %w", err)
	}
	if w.files, err = w.js.ObjectStore(ctx, events.BucketFiles); err != nil {
		return fmt.Errorf("worker: files: %w", err)
	}
	w.setOutputBudget(ctx)
	w.goTracked(func() { w.watchTenants(ctx) })
	defer w.watchDeaths()()
	defer w.watchReaps()()
	// The lease first: a restart with the same id shows at once (a later
	// started_at), so the router answers what the old process held
	// (SBX_E1621, SBX_E1620) instead of letting the old lease run out while
	// the sandboxes are re-adopted, which would answer SBX_E1204 for
	// sandboxes that survive. Commands wait in SBX_CMD until the consumers
	// start, after the re-adoption.
	if err := w.putLease(ctx); err != nil {
		return fmt.Errorf("worker: lease: %w", err)
	}
	if err := w.reconcile(ctx, true); err != nil {
		w.log.Warn("reconcile at start-up failed", slog.Any("err", err))
	}

	if err := w.consumers.start(ctx, w); err != nil {
		return err
	}
	if err := w.startPorts(ctx); err != nil {
		return fmt.Errorf("worker: ports: %w", err)
	}
	w.log.Info("worker started", "isolation", w.info.Isolation, "capacity", w.cfg.Capacity)

	ticker := time.NewTicker(w.cfg.HeartbeatInterval)
	defer ticker.Stop()
	// Reconcile on its own goroutine: a slow backend must never delay the
	// heartbeat, or the lease lapses and the router declares the worker lost.
	w.goTracked(func() {
		t := time.NewTicker(w.cfg.ReconcileInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := w.reconcile(ctx, false); err != nil && ctx.Err() == nil {
					w.log.Warn("reconcile failed", slog.Any("err", err))
				}
			}
		}
	})
	for beat := 1; ctx.Err() == nil; beat++ {
		select {
		case <-ctx.Done():
		case <-ticker.C:
			if err := w.putLease(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("lease heartbeat failed", slog.Any("err", err))
			}
			// Usage that changed (a long stream's output) reaches the
			// registry at least once a beat.
			w.goTracked(func() { w.saveUsages(ctx) })
			// A consumer deleted under a live worker (the reaper after a
			// partition longer than lease + grace) is looked for every few
			// beats, besides when the consumer reports it (consumers.lost).
			if beat%consumerCheckBeats == 0 {
				w.consumers.check(ctx, w)
			}
		case <-w.consumers.lost:
			w.consumers.check(ctx, w)
		}
	}

	close(w.stopping)
	w.consumers.stop()
	if w.cfg.KillOnShutdown {
		w.killAll("worker shutdown")
	}
	w.stopTimers() // before waiting: a timer firing now would start new work
	w.drain()
	// Withdraw the lease only when nothing is left behind. With live
	// sandboxes the lease runs out on its own (LeaseTTL): a restart with the
	// same id within it re-adopts them before the reaper calls them lost.
	if w.liveCount() == 0 {
		// Teardown: Run's values, not its cancellation.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := w.leases.Delete(dctx, events.WorkerKey(w.info.Name, w.cfg.WorkerID)); err != nil {
			w.log.Debug("lease delete", slog.Any("err", err))
		}
	}
	w.log.Info("worker stopped")
	return nil
}

func (w *Worker) liveCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sandboxes)
}

// acquire takes a concurrency slot, waiting at most QueueWait.
func (w *Worker) acquire(ctx context.Context) *events.Error {
	select {
	case w.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(w.cfg.QueueWait)
	defer t.Stop()
	select {
	case w.slots <- struct{}{}:
		return nil
	case <-t.C:
		return events.Errorf(events.CodeOverloaded, "worker %s is at its limit of %d concurrent operations", w.cfg.WorkerID, w.cfg.Capacity)
	case <-ctx.Done():
		return events.Errorf(events.CodeBackendUnavailable, "worker shutting down")
	}
}

func (w *Worker) release() { <-w.slots }

// goTracked runs f on a goroutine that Run waits for, and reports whether
// it did: once Run has waited for the last of them, f is not run.
func (w *Worker) goTracked(f func()) bool {
	if w.goroutines.start(f) {
		return true
	}
	w.log.Debug("work not started: the worker has stopped")
	return false
}

// reply answers a command's ce-replyto with v, or with e as an error body
// and the micro error headers.
func (w *Worker) reply(to string, v any, e *events.Error) {
	if to == "" {
		return
	}
	m := nats.NewMsg(to)
	if e != nil {
		m.Header[events.HeaderServiceErrorCode] = []string{strconv.Itoa(e.Code.Number())}
		m.Header[events.HeaderServiceError] = []string{e.Name + ": " + e.Message}
		m.Data = events.EncodeError(e)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			ie := events.Errorf(events.CodeInternal, "encode reply: %v", err)
			m.Header[events.HeaderServiceErrorCode] = []string{strconv.Itoa(ie.Code.Number())}
			m.Header[events.HeaderServiceError] = []string{ie.Name}
			b = events.EncodeError(ie)
		}
		m.Data = b
	}
	if err := w.nc.PublishMsg(m); err != nil {
		w.log.Warn("reply failed", slog.Any("err", err))
	}
}

// classify turns a backend error into an SBX error: classified errors keep
// their code, a missing file (fs.ErrNotExist, or an InvalidValue a backend
// marked reason "not_found" before SBX_E1207 existed) is FileNotFound,
// anything else is SBX_E1603 BackendError. It always returns a fresh copy:
// a backend may return a package sentinel (events.ErrSandboxGone) and
// callers rewrite the message (redaction), which must never touch the
// shared value.
func classify(err error) *events.Error {
	var e *events.Error
	if errors.As(err, &e) {
		if e.Code == events.CodeInvalidValue && e.Details["reason"] == "not_found" {
			return events.Errorf(events.CodeFileNotFound, "%s", e.Message).With("field", "path")
		}
		c := *e
		if e.Details != nil {
			c.Details = maps.Clone(e.Details)
		}
		return &c
	}
	if errors.Is(err, fs.ErrNotExist) {
		return events.Errorf(events.CodeFileNotFound, "%s", err.Error()).With("field", "path")
	}
	return events.Errorf(events.CodeBackendError, "%s", err.Error())
}
