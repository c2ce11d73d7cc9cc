package reaper

import (
	"errors"
	"log/slog"
	"time"

	"github.com/sandboxio/sandboxio/internal/recsign"
)

// LeaderBucket is the KV bucket holding the active reaper's lease; the
// reaper creates it.
const (
	LeaderBucket = recsign.ReaperBucket
	LeaderKey    = "active"
)

// Kinds of the operation records the reaper publishes.
const (
	KindReap = "reap" // a kill the reaper caused (deadline)
	KindLost = "lost" // a sandbox marked lost because its worker's lease expired
)

// EndReasonWorkerLost is the end_reason of a sandbox marked lost.
const EndReasonWorkerLost = "worker lost"

// Config configures the reaper.
type Config struct {
	// InstanceID names this instance (logs, leader lease, record source
	// sandboxio/reaper/<id>). Default: a new id.
	InstanceID string
	// Interval is the period of the background sweep. Default 10s.
	Interval time.Duration
	// CreationGrace: a sandbox younger than this is not marked lost by a
	// sweep just because its worker's lease is not visible. Default 30s.
	CreationGrace time.Duration
	// LostGrace is how long a worker's lease must stay gone after a delete or
	// expiry event before the active reaper marks its sandboxes lost and
	// cleans up its consumer: a worker restarted with the same id within the
	// grace re-adopts its sandboxes. Keep it above the worker lease TTL plus
	// a restart. Default 15s.
	LostGrace time.Duration
	// LeaderTTL is the active instance's lease TTL; a standby takes over
	// within about this long after the active one dies. Minimum 1s. Default 5s.
	LeaderTTL time.Duration
	// KillTimeout bounds the wait for a worker's kill reply. Default 10s.
	KillTimeout time.Duration
	// SigningSeed is the user nkey seed (SU…) the reaper signs its records
	// and its kill commands with; every instance of a deployment may share
	// one (auth init writes keys/signing-reaper.nk and lists its public key
	// in signers.txt and commanders.txt).
	// Empty: a new key per instance. Each instance advertises its public key
	// in sbx_reaper (recsign.SignerKey) while it runs. Never logged.
	SigningSeed []byte
	// StuckCreate is how long a sandbox may stay creating on a live worker
	// before a sweep kills it; default 3 min (beyond the router's create
	// timeout, 90 s, and the worker's, 60 s: no create still in progress
	// is that old).
	StuckCreate time.Duration
	// Replicas of the sbx_reaper bucket. Set (> 0), Run creates the bucket
	// with it or updates an existing one to it; zero uses an existing
	// bucket as it is and creates a missing one with 1 replica (so that a
	// reaper without --replicas never shrinks a clustered bucket).
	Replicas int
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.CreationGrace <= 0 {
		c.CreationGrace = 30 * time.Second
	}
	if c.LostGrace <= 0 {
		c.LostGrace = 15 * time.Second
	}
	if c.StuckCreate <= 0 {
		c.StuckCreate = 3 * time.Minute
	}
	if c.LeaderTTL <= 0 {
		c.LeaderTTL = 5 * time.Second
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.LeaderTTL < time.Second {
		return errors.New("reaper: LeaderTTL must be at least 1s (the server's minimum marker TTL)")
	}
	if len(c.SigningSeed) > 0 {
		if _, err := recsign.NewKey(c.SigningSeed); err != nil {
			return errors.New("reaper: SigningSeed is not a user nkey seed (SU…)")
		}
	}
	return nil
}
