package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Config sizes the bus. The zero value is usable: Defaults fills it.
type Config struct {
	// Replicas of every stream and bucket: 1 for a single server, 3 in a cluster.
	Replicas int
	// Owner makes this process the one that decides the bus's
	// configuration: Ensure updates the streams and buckets whose
	// configuration differs from this one. Without it Ensure only creates
	// what is missing and leaves the rest as it finds it, so that the last
	// process to start (a worker with another --replicas) never reconfigures
	// the bus. One process is the owner: the router started with an
	// explicit --replicas, or `sandboxio dev`.
	Owner bool
	// Memory stores everything in memory (tests and benchmarks only).
	Memory bool
	// LeaseTTL is how long a worker's lease lives without a heartbeat.
	LeaseTTL time.Duration
	// OutputMaxAge and OutputMaxBytes bound SBX_OUT.
	OutputMaxAge   time.Duration
	OutputMaxBytes int64
	// OpsMaxAge bounds SBX_OPS (the auditor keeps the durable copy).
	OpsMaxAge time.Duration
	// ReaperLeaderTTL is the TTL of the reaper's lease bucket sbx_reaper
	// (the reaper's LeaderTTL). Default 5s.
	ReaperLeaderTTL time.Duration
	// RegistryTTL bounds how long an ended sandbox's record stays readable.
	// It must exceed the longest lifetime (events.MaxLifetimeSeconds) so a
	// live record never expires; writes refresh it.
	RegistryTTL time.Duration
	// Byte limits of the other streams and buckets (OutputMaxBytes is
	// SBX_OUT's): every one is bounded, so that no stream can fill the
	// JetStream store that all of them share. Zero: DefaultMaxBytes, scaled
	// down when the store is smaller than their sum (Ensure). A full
	// SBX_CMD, SBX_OPS, bucket or sbx_files refuses new writes (SBX_OPS's
	// records are never dropped to make room: workers retry them, and audit
	// policy fail refuses the operation); a full SBX_OUT drops its oldest
	// output.
	CommandsMaxBytes    int64
	OpsMaxBytes         int64
	FilesMaxBytes       int64
	RegistryMaxBytes    int64
	WorkersMaxBytes     int64
	IdempotencyMaxBytes int64
	TenantsMaxBytes     int64
	AuditMaxBytes       int64
	// SnapshotsMaxBytes bounds sbx_snapshots, the durable sandboxes'
	// snapshots (default 4 GiB).
	SnapshotsMaxBytes int64
	// StoreLimit is the JetStream store the byte limits must fit in (the
	// embedded server's max_file_store); 0: the account's JetStream store
	// limit when AccountInfo reports one. See Ensure.
	StoreLimit int64
	// Logger says what Ensure changed on its own (limits scaled or kept);
	// nil: discarded.
	Logger *slog.Logger
}

// DefaultMaxBytes are the byte limits of a Config that sets none: about
// 16 GiB of the JetStream store in all.
var DefaultMaxBytes = Config{
	OutputMaxBytes:      8 << 30,
	CommandsMaxBytes:    1 << 30,
	OpsMaxBytes:         4 << 30,
	FilesMaxBytes:       2 << 30,
	RegistryMaxBytes:    1 << 30,
	WorkersMaxBytes:     16 << 20,
	IdempotencyMaxBytes: 64 << 20,
	TenantsMaxBytes:     16 << 20,
	AuditMaxBytes:       1 << 20,
	SnapshotsMaxBytes:   4 << 30,
}

// Defaults returns c with zero fields set.
func (c Config) Defaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 6 * time.Second
	}
	if c.ReaperLeaderTTL == 0 {
		c.ReaperLeaderTTL = 5 * time.Second
	}
	if c.OutputMaxAge == 0 {
		c.OutputMaxAge = 24 * time.Hour
	}
	if c.OpsMaxAge == 0 {
		c.OpsMaxAge = 30 * 24 * time.Hour
	}
	if c.RegistryTTL == 0 {
		c.RegistryTTL = time.Duration(events.MaxLifetimeSeconds)*time.Second + 2*time.Hour
	}
	for _, l := range c.Limits() {
		if *l.Bytes <= 0 {
			*l.Bytes = l.Default
		}
	}
	return c
}

// Limit is one of a Config's byte limits.
type Limit struct {
	// Name is the limit's short name: its flag is --<Name>-max-bytes and
	// its environment variable SBX_BUS_<NAME>_MAX_BYTES (SBX_OUT's is
	// SBX_OUTPUT_MAX_BYTES).
	Name string
	// Bounds is the stream or bucket it bounds.
	Bounds  string
	Bytes   *int64
	Default int64
}

// Limits returns c's byte limits, each pointing into c.
func (c *Config) Limits() []Limit {
	d := DefaultMaxBytes
	return []Limit{
		{"output", events.StreamOutput, &c.OutputMaxBytes, d.OutputMaxBytes},
		{"ops", events.StreamOps, &c.OpsMaxBytes, d.OpsMaxBytes},
		{"commands", events.StreamCommands, &c.CommandsMaxBytes, d.CommandsMaxBytes},
		{"files", events.BucketFiles, &c.FilesMaxBytes, d.FilesMaxBytes},
		{"registry", events.BucketRegistry, &c.RegistryMaxBytes, d.RegistryMaxBytes},
		{"workers", events.BucketWorkers, &c.WorkersMaxBytes, d.WorkersMaxBytes},
		{"idempotency", events.BucketIdempotency, &c.IdempotencyMaxBytes, d.IdempotencyMaxBytes},
		{"tenants", events.BucketTenants, &c.TenantsMaxBytes, d.TenantsMaxBytes},
		{"audit", events.BucketAudit, &c.AuditMaxBytes, d.AuditMaxBytes},
		{"snapshots", events.BucketSnapshots, &c.SnapshotsMaxBytes, d.SnapshotsMaxBytes},
	}
}

// reaperBucketBytes is the fixed byte limit of the reaper's bucket.
const reaperBucketBytes = 1 << 20

// ReaperBucket is the reaper's KV bucket: its leader lease and the
// adverts of its signing keys (internal/recsign).
const ReaperBucket = "sbx_reaper"

// BucketAPIKeys holds the API keys of the HTTP front doors (the
// E2B-compatible API): key the hex SHA-256 of an API key, value the tenant
// it acts for. Written only by admin (`sandboxio tenant key add|rm`).
const BucketAPIKeys = "sbx_apikeys"

// apiKeysBucketBytes is the fixed byte limit of sbx_apikeys (some ten
// thousand keys of about 250 bytes each).
const apiKeysBucketBytes = 4 << 20

// minScaledBytes is the least a default limit is scaled down to.
const minScaledBytes = 1 << 20

// fit scales the limits c leaves unset (their defaults) down so that every
// limit fits in three quarters of store (the rest is left to other streams
// and the server), when they would not fit in the whole of it. It returns
// the factor applied (1: none). Limits the operator set are kept as they
// are; when those alone do not fit, nothing is scaled and the server's
// refusal says so.
func (c Config) fit(store int64) (Config, float64) {
	var set, def int64
	for _, l := range c.Limits() {
		if *l.Bytes > 0 {
			set += *l.Bytes
		} else {
			def += l.Default
		}
	}
	room := store*3/4 - set - reaperBucketBytes - apiKeysBucketBytes
	if store <= 0 || def == 0 || set+def+reaperBucketBytes+apiKeysBucketBytes <= store || room <= 0 {
		return c, 1
	}
	f := float64(room) / float64(def)
	for _, l := range c.Limits() {
		if *l.Bytes <= 0 {
			*l.Bytes = max(int64(float64(l.Default)*f), minScaledBytes)
		}
	}
	return c, f
}

// storeLimit is the store the limits must fit in: c.StoreLimit, or the
// account's JetStream limit for c's storage (0: none known).
func (c Config) storeLimit(ctx context.Context, js jetstream.JetStream) int64 {
	if c.StoreLimit > 0 {
		return c.StoreLimit
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // leaves Ensure's own attempt time
	defer cancel()
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		c.logger().Debug("bus: account info", slog.Any("err", err))
		return 0
	}
	if c.Memory {
		return max(ai.Limits.MaxMemory, 0)
	}
	return max(ai.Limits.MaxStore, 0)
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// CommandDuplicates and RecordDuplicates are SBX_CMD's and SBX_OPS's
// de-duplication windows (ADR 25). Each must outlast the longest span over
// which one message is published again with the same Nats-Msg-Id: a
// command, by the router until its Sbx-Not-After plus a grace (its
// QueueTimeout is refused past what this window covers); a record, by its
// worker for a minute and one ack wait. JetStream keeps every id of the
// window in memory, about 90 bytes each, three per exec: a 10-minute window
// was 1.2 GiB at 8,000 execs/s, and the collector scanning it halved the
// server's throughput within minutes (docs/benchmarks.md).
const (
	CommandDuplicates = 2 * time.Minute
	RecordDuplicates  = 2 * time.Minute
)

// MaxCheckpointBytes bounds a value of the sbx_audit bucket (one
// checkpoint line, well under a kilobyte).
const MaxCheckpointBytes = 8 << 10

// MaxOutputChunk is the largest message on SBX_OUT.
const MaxOutputChunk = 256 << 10

func (c Config) storage() jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// StreamConfigs returns the three streams.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	c = c.Defaults()
	return []jetstream.StreamConfig{
		{
			Name:        events.StreamCommands,
			Description: "sandboxio commands to workers (work queue)",
			Subjects:    []string{events.SubjectCmdAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     c.storage(),
			Replicas:    c.Replicas,
			Duplicates:  CommandDuplicates,
			MaxAge:      24 * time.Hour,
			MaxBytes:    c.CommandsMaxBytes,
			Discard:     jetstream.DiscardNew, // a full queue refuses a command; it never drops one queued
			MaxMsgSize:  2 << 20,
			// For the router's ballast (RunBallast), which expires by TTL.
			AllowMsgTTL: true,
		},
		{
			Name:        events.StreamOps,
			Description: "sandboxio operation records",
			Subjects:    []string{events.SubjectOpsAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     c.storage(),
			Replicas:    c.Replicas,
			Duplicates:  RecordDuplicates,
			MaxAge:      c.OpsMaxAge,
			MaxBytes:    c.OpsMaxBytes,
			// A full SBX_OPS refuses new records: dropping the oldest
			// would let whoever floods sbx.ops.> remove records the
			// auditor has not read yet. Workers queue and retry a refused
			// record; under audit policy fail the operation is refused.
			Discard:    jetstream.DiscardNew,
			MaxMsgSize: 1 << 20,
			// The audit trail cannot be rewritten through the JetStream
			// API: no message delete, no purge (records leave only by
			// MaxAge). Once set, the server refuses to clear either.
			DenyDelete: true,
			DenyPurge:  true,
		},
		{
			Name:              events.StreamOutput,
			Description:       "sandboxio process output and exit markers",
			Subjects:          []string{events.SubjectOutAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           c.storage(),
			Replicas:          c.Replicas,
			Duplicates:        2 * time.Minute,
			MaxAge:            c.OutputMaxAge,
			MaxBytes:          c.OutputMaxBytes,
			MaxMsgsPerSubject: 1_000_000,
			Discard:           jetstream.DiscardOld,
			MaxMsgSize:        MaxOutputChunk + 4096,
			AllowDirect:       true,
			RePublish:         &jetstream.RePublish{Source: events.SubjectOutAll, Destination: events.SubjectLiveAll},
		},
	}
}

// KeyValueConfigs returns the buckets.
func (c Config) KeyValueConfigs() []jetstream.KeyValueConfig {
	c = c.Defaults()
	return []jetstream.KeyValueConfig{
		// Limit markers make expiry visible to watchers, so caches of the
		// registry (the router's) drop expired records.
		{Bucket: events.BucketRegistry, Description: "sandbox registry", History: 5, TTL: c.RegistryTTL,
			LimitMarkerTTL: time.Minute, MaxBytes: c.RegistryMaxBytes, Storage: c.storage(), Replicas: c.Replicas},
		{Bucket: events.BucketWorkers, Description: "worker leases", History: 1, TTL: c.LeaseTTL,
			LimitMarkerTTL: time.Minute, MaxBytes: c.WorkersMaxBytes, Storage: c.storage(), Replicas: c.Replicas},
		{Bucket: events.BucketIdempotency, Description: "create idempotency keys", History: 1, TTL: 24 * time.Hour,
			MaxBytes: c.IdempotencyMaxBytes, Storage: c.storage(), Replicas: c.Replicas},
		// Tenants and their quotas, written by the operator's tools; kept
		// until removed.
		{Bucket: events.BucketTenants, Description: "tenants and their quotas", History: 1,
			MaxBytes: c.TenantsMaxBytes, Storage: c.storage(), Replicas: c.Replicas},
		// The active reaper's lease and the reapers' signing-key adverts
		// (services/reaper, internal/recsign): created here so that no
		// service needs to create a stream (ADR 35).
		{Bucket: ReaperBucket, Description: "active reaper lease", History: 1, TTL: c.ReaperLeaderTTL,
			LimitMarkerTTL: time.Minute, MaxBytes: 1 << 20, Storage: c.storage(), Replicas: c.Replicas},
		// The auditor's latest signed checkpoint line of each log it
		// writes (key: the log's id), for `audit verify
		// --checkpoint-from-bus`: a cut-off tail shows without a copy kept
		// by the operator. Only the auditor (and admin) may put.
		{Bucket: events.BucketAudit, Description: "audit log checkpoints", History: 1,
			MaxValueSize: MaxCheckpointBytes, MaxBytes: c.AuditMaxBytes, Storage: c.storage(), Replicas: c.Replicas},
		// The HTTP front doors' API keys (hashed) and the tenant each acts
		// for; only admin writes them.
		{Bucket: BucketAPIKeys, Description: "front door API keys (hashed)", History: 1,
			MaxValueSize: 1024, MaxBytes: apiKeysBucketBytes, Storage: c.storage(), Replicas: c.Replicas},
	}
}

// ObjectStoreConfig returns the files bucket.
func (c Config) ObjectStoreConfig() jetstream.ObjectStoreConfig {
	c = c.Defaults()
	return jetstream.ObjectStoreConfig{Bucket: events.BucketFiles,
		Description: "files larger than one message", TTL: 24 * time.Hour, MaxBytes: c.FilesMaxBytes,
		Storage: c.storage(), Replicas: c.Replicas}
}

// SnapshotStoreConfig returns the snapshots bucket: no TTL (the reaper
// removes what outlives its retention), bounded by SnapshotsMaxBytes.
func (c Config) SnapshotStoreConfig() jetstream.ObjectStoreConfig {
	c = c.Defaults()
	return jetstream.ObjectStoreConfig{Bucket: events.BucketSnapshots,
		Description: "durable sandboxes' snapshots", MaxBytes: c.SnapshotsMaxBytes,
		Storage: c.storage(), Replicas: c.Replicas}
}

// Ensure creates every stream and bucket that is missing and, for the
// Owner only, updates those whose configuration differs. It is idempotent
// and safe to call from every service at start-up: it reads each stream's
// configuration first and issues no create or update when it exists (or,
// for the owner, already matches), so that services whose users may not
// call $JS.API.STREAM.UPDATE (SBX_OPS) start on a bus the operator set up.
//
// The default byte limits are scaled down to fit a JetStream store smaller
// than their sum (Config.StoreLimit, or the account's limit), and the
// owner never lowers a stream's limit below the bytes it holds (the server
// would delete the oldest messages at once, SBX_OPS's records too): that
// stream keeps its limit, and a warning says so.
func Ensure(ctx context.Context, js jetstream.JetStream, c Config) error {
	log := c.logger()
	if store := c.storeLimit(ctx, js); store > 0 {
		var f float64
		if c, f = c.fit(store); f < 1 {
			log.Info("bus: the default byte limits exceed the JetStream store: scaled down to fit",
				"store_bytes", store, "factor", fmt.Sprintf("%.4f", f), "ops_max_bytes", c.OpsMaxBytes, "output_max_bytes", c.OutputMaxBytes)
		}
	}
	c = c.Defaults()
	for _, sc := range c.StreamConfigs() {
		if err := ensureStream(ctx, js, sc, c.Owner, log); err != nil {
			return fmt.Errorf("bus: stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range c.KeyValueConfigs() {
		have, err := existing(ctx, js, "KV_"+kc.Bucket)
		if err != nil {
			return fmt.Errorf("bus: bucket %s: %w", kc.Bucket, err)
		}
		if have != nil && c.Owner {
			kc.MaxBytes = keptLimit(have, kc.MaxBytes, log)
		}
		if have != nil && (!c.Owner || bucketMatches(have.Config, kc.Description, int64(max(kc.History, 1)), kc.TTL, kc.LimitMarkerTTL, kc.MaxBytes, kc.Storage, kc.Replicas)) {
			continue
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("bus: bucket %s: %w", kc.Bucket, err)
		}
	}
	for _, oc := range []jetstream.ObjectStoreConfig{c.ObjectStoreConfig(), c.SnapshotStoreConfig()} {
		have, err := existing(ctx, js, "OBJ_"+oc.Bucket)
		if err != nil {
			return fmt.Errorf("bus: object store %s: %w", oc.Bucket, err)
		}
		if have != nil && c.Owner {
			oc.MaxBytes = keptLimit(have, oc.MaxBytes, log)
		}
		if have == nil || c.Owner && !bucketMatches(have.Config, oc.Description, have.Config.MaxMsgsPerSubject, oc.TTL, 0, oc.MaxBytes, oc.Storage, oc.Replicas) {
			if _, err := js.CreateOrUpdateObjectStore(ctx, oc); err != nil {
				return fmt.Errorf("bus: object store %s: %w", oc.Bucket, err)
			}
		}
	}
	return nil
}

// keptLimit is the byte limit to give an existing stream that should have
// want: want, unless the stream holds more than want, when it keeps the
// limit it has.
func keptLimit(have *jetstream.StreamInfo, want int64, log *slog.Logger) int64 {
	holds := have.State.Bytes
	if want <= 0 || holds <= uint64(want) || have.Config.MaxBytes > 0 && have.Config.MaxBytes <= want {
		return want
	}
	log.Warn("bus: a byte limit below what the stream holds is not applied; the stream keeps its limit (raise the limit, or it applies once MaxAge has removed enough)",
		"stream", have.Config.Name, "holds_bytes", holds, "limit", want, "kept", have.Config.MaxBytes)
	return have.Config.MaxBytes
}

// existing returns the information of a stream, or nil when there is none.
func existing(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, owner bool, log *slog.Logger) error {
	have, err := existing(ctx, js, want.Name)
	if err != nil {
		return err
	}
	if have == nil {
		_, err = js.CreateStream(ctx, want)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		// Another service created it meanwhile: compare with that.
		if have, err = existing(ctx, js, want.Name); err != nil || have == nil {
			return errors.Join(err, jetstream.ErrStreamNameAlreadyInUse)
		}
	}
	if !owner {
		return nil
	}
	want.MaxBytes = keptLimit(have, want.MaxBytes, log)
	if streamMatches(have.Config, want) {
		return nil
	}
	_, err = js.UpdateStream(ctx, want)
	return err
}

// streamMatches compares the fields StreamConfigs sets.
func streamMatches(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Duplicates == want.Duplicates && have.MaxAge == want.MaxAge &&
		(want.MaxBytes == 0 && have.MaxBytes <= 0 || have.MaxBytes == want.MaxBytes) &&
		(want.MaxMsgsPerSubject == 0 && have.MaxMsgsPerSubject <= 0 || have.MaxMsgsPerSubject == want.MaxMsgsPerSubject) &&
		have.Discard == want.Discard && have.MaxMsgSize == want.MaxMsgSize && have.AllowDirect == want.AllowDirect &&
		have.DenyDelete == want.DenyDelete && have.DenyPurge == want.DenyPurge && have.AllowMsgTTL == want.AllowMsgTTL &&
		rePublishEqual(have.RePublish, want.RePublish)
}

func rePublishEqual(a, b *jetstream.RePublish) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// bucketMatches compares a bucket's stream with what its config asks for.
func bucketMatches(have jetstream.StreamConfig, desc string, history int64, ttl, markerTTL time.Duration, maxBytes int64, st jetstream.StorageType, replicas int) bool {
	return have.Description == desc && have.MaxMsgsPerSubject == history && have.MaxAge == ttl && have.MaxBytes == maxBytes &&
		have.SubjectDeleteMarkerTTL == markerTTL && have.Storage == st && have.Replicas == max(replicas, 1)
}

// EnsureWithRetry calls Ensure until it succeeds or ctx ends: a clustered
// JetStream may need seconds to elect a meta leader after start.
func EnsureWithRetry(ctx context.Context, js jetstream.JetStream, c Config) error {
	return retry(ctx, 5*time.Second, 250*time.Millisecond, func(ctx context.Context) error { return Ensure(ctx, js, c) })
}

// WaitReady waits until the streams and buckets exist (another service
// creates them with Ensure). Consumers of the bus that do not own its
// configuration call it instead of Ensure, so that they never change the
// replicas or limits an operator chose.
func WaitReady(ctx context.Context, js jetstream.JetStream) error {
	return retry(ctx, 2*time.Second, 100*time.Millisecond, func(ctx context.Context) error { return ready(ctx, js) })
}

// retry calls f, each attempt bounded by perTry, every interval until it
// succeeds or ctx ends.
func retry(ctx context.Context, perTry, interval time.Duration, f func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		err := f(tctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

func ready(ctx context.Context, js jetstream.JetStream) error {
	for _, s := range []string{events.StreamCommands, events.StreamOps, events.StreamOutput} {
		if _, err := js.Stream(ctx, s); err != nil {
			return fmt.Errorf("bus: stream %s: %w", s, err)
		}
	}
	for _, b := range []string{events.BucketRegistry, events.BucketWorkers} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			return fmt.Errorf("bus: bucket %s: %w", b, err)
		}
	}
	return nil
}
