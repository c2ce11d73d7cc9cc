package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Config sizes the bus. The zero value is usable: Defaults fills it.
type Config struct {
	// Replicas of every stream and bucket: 1 for a single server, 3 in a cluster.
	Replicas int
	// Memory stores everything in memory (tests and benchmarks only).
	Memory bool
	// LeaseTTL is how long a worker's lease lives without a heartbeat.
	LeaseTTL time.Duration
	// OutputMaxAge and OutputMaxBytes bound SBX_OUT.
	OutputMaxAge   time.Duration
	OutputMaxBytes int64
	// OpsMaxAge bounds SBX_OPS (the auditor keeps the durable copy).
	OpsMaxAge time.Duration
	// RegistryTTL bounds how long an ended sandbox's record stays readable.
	// It must exceed the longest lifetime (events.MaxLifetimeSeconds) so a
	// live record never expires; writes refresh it.
	RegistryTTL time.Duration
}

// Defaults returns c with zero fields set.
func (c Config) Defaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 6 * time.Second
	}
	if c.OutputMaxAge == 0 {
		c.OutputMaxAge = 24 * time.Hour
	}
	if c.OutputMaxBytes == 0 {
		c.OutputMaxBytes = 8 << 30
	}
	if c.OpsMaxAge == 0 {
		c.OpsMaxAge = 30 * 24 * time.Hour
	}
	if c.RegistryTTL == 0 {
		c.RegistryTTL = time.Duration(events.MaxLifetimeSeconds)*time.Second + 2*time.Hour
	}
	return c
}

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
			Duplicates:  10 * time.Minute,
			MaxAge:      24 * time.Hour,
			MaxMsgSize:  2 << 20,
		},
		{
			Name:        events.StreamOps,
			Description: "sandboxio operation records",
			Subjects:    []string{events.SubjectOpsAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     c.storage(),
			Replicas:    c.Replicas,
			Duplicates:  10 * time.Minute,
			MaxAge:      c.OpsMaxAge,
			MaxMsgSize:  1 << 20,
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

// Ensure creates or updates every stream and bucket. It is idempotent and
// safe to call from every service at start-up.
func Ensure(ctx context.Context, js jetstream.JetStream, c Config) error {
	c = c.Defaults()
	for _, sc := range c.StreamConfigs() {
		// Create first: the server accepts the create of a stream that
		// exists with the same configuration without an update, which
		// services may not call on SBX_OPS (docs/security.md). Only a
		// changed configuration is an update.
		_, err := js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = js.UpdateStream(ctx, sc)
		}
		if err != nil {
			return fmt.Errorf("bus: stream %s: %w", sc.Name, err)
		}
	}
	kvs := []jetstream.KeyValueConfig{
		// Limit markers make expiry visible to watchers, so caches of the
		// registry (the router's) drop expired records.
		{Bucket: events.BucketRegistry, Description: "sandbox registry", History: 5, TTL: c.RegistryTTL,
			LimitMarkerTTL: time.Minute, Storage: c.storage(), Replicas: c.Replicas},
		{Bucket: events.BucketWorkers, Description: "worker leases", History: 1, TTL: c.LeaseTTL,
			LimitMarkerTTL: time.Minute, Storage: c.storage(), Replicas: c.Replicas},
		{Bucket: events.BucketIdempotency, Description: "create idempotency keys", History: 1, TTL: 24 * time.Hour,
			Storage: c.storage(), Replicas: c.Replicas},
	}
	for _, kc := range kvs {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("bus: bucket %s: %w", kc.Bucket, err)
		}
	}
	_, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: events.BucketFiles,
		Description: "files larger than one message", TTL: 24 * time.Hour, Storage: c.storage(), Replicas: c.Replicas})
	if err != nil {
		return fmt.Errorf("bus: object store %s: %w", events.BucketFiles, err)
	}
	return nil
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
