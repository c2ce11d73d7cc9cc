// Package bus forwards to pkg/bus, where the bus's layout and its setup
// live, for the importers that still name this path. New code imports
// pkg/bus.
package bus

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/bus"
)

type (
	Config = bus.Config
	Limit  = bus.Limit
)

var DefaultMaxBytes = bus.DefaultMaxBytes

const (
	ReaperBucket       = bus.ReaperBucket
	BucketAPIKeys      = bus.BucketAPIKeys
	CommandDuplicates  = bus.CommandDuplicates
	RecordDuplicates   = bus.RecordDuplicates
	MaxCheckpointBytes = bus.MaxCheckpointBytes
	MaxOutputChunk     = bus.MaxOutputChunk
	BallastEvery       = bus.BallastEvery
	BallastTTL         = bus.BallastTTL
)

func Ensure(ctx context.Context, js jetstream.JetStream, c Config) error {
	return bus.Ensure(ctx, js, c)
}

func EnsureWithRetry(ctx context.Context, js jetstream.JetStream, c Config) error {
	return bus.EnsureWithRetry(ctx, js, c)
}

func WaitReady(ctx context.Context, js jetstream.JetStream) error { return bus.WaitReady(ctx, js) }

func RunBallast(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	bus.RunBallast(ctx, js, log)
}
