package auditor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nkeys"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config configures the auditor.
type Config struct {
	// Durable is the name of the durable consumer on SBX_OPS, shared by the
	// instances that divide the records between them. Default "auditor".
	Durable string
	// TrustedSigners are the public nkeys (U…) whose record signatures the
	// auditor accepts. Empty: a key a worker advertised in its lease for the
	// record's worker is accepted (weaker: see docs/security.md).
	TrustedSigners []string
	// LogPath is this instance's audit log file (one writer per file).
	// Default "sandboxio-audit.jsonl".
	LogPath string
	// InstanceID names this instance in logs, spans and metrics. Default: a new id.
	InstanceID string
	// Batch is PullMaxMessages and the most records written per fsync. Default 64.
	Batch int
	// MaxAckPending bounds unacknowledged records across all instances. Default 1024.
	MaxAckPending int
	// AckWait is how long a delivered record may stay unacknowledged. Default 30s.
	AckWait time.Duration
	// MetricsAddr, when set (e.g. ":9464"), serves Prometheus metrics at /metrics.
	MetricsAddr string
	// ServiceName is the OpenTelemetry service.name (OTEL_SERVICE_NAME
	// overrides it). Default "sandboxio-auditor". The span exporter is chosen
	// from the standard OTEL_* variables; with none set, spans are not exported.
	ServiceName string
	// SpanExporter overrides the exporter chosen from the environment (tests).
	SpanExporter sdktrace.SpanExporter
	// OpenSpanMaxAge drops a span whose operation has not closed here after
	// this long: its closed record went to another instance (which renders
	// the complete span from that record alone, from its StartedAt), or its
	// worker died (the reaper records that). A dropped span is never ended,
	// so never exported. Default 1h.
	OpenSpanMaxAge time.Duration
	// MaxOpenSpans bounds the operations opened and not yet closed here;
	// beyond it the oldest is dropped (not exported). Default 10000.
	MaxOpenSpans int
	// IndexSize is how many of the most recent record ids of the log are
	// remembered, so that a redelivered or re-published record is skipped
	// (see Log). Default DefaultIndexSize.
	IndexSize int
	// SigningSeed is the auditor's nkey seed (SU…) that signs the log's
	// checkpoints (FormatVersion 2). Default: a new key for this process
	// (its public key is logged at start); `audit verify --auditor-key`
	// needs the keys that signed a log's checkpoints.
	SigningSeed []byte
	// CheckpointEvery is how many lines at most follow a checkpoint before
	// the next; one also closes the log when the auditor stops. Default
	// DefaultCheckpointEvery.
	CheckpointEvery int
	// CheckpointInterval is how old the oldest line after the last
	// checkpoint may get before the next one is written and published, so
	// that a quiet log's tail is sealed too. Default
	// DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Durable == "" {
		c.Durable = "auditor"
	}
	if c.LogPath == "" {
		c.LogPath = "sandboxio-audit.jsonl"
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 1024
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ServiceName == "" {
		c.ServiceName = "sandboxio-auditor"
	}
	if c.OpenSpanMaxAge <= 0 {
		c.OpenSpanMaxAge = time.Hour
	}
	if c.MaxOpenSpans <= 0 {
		c.MaxOpenSpans = 10000
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.IndexSize <= 0 {
		c.IndexSize = DefaultIndexSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, k := range c.TrustedSigners {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("auditor: TrustedSigners: %q is not a public user nkey (U…)", k)
		}
	}
	if c.Batch > c.MaxAckPending {
		return errors.New("auditor: Batch must not exceed MaxAckPending")
	}
	return nil
}
