package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The latest checkpoint of each log is published in KV sbx_audit under the
// log's id (bus.KeyValueConfigs creates the bucket; only the auditor may
// put to it: ADR 35): the whole signed checkpoint line, so that `audit
// verify --checkpoint-from-bus` checks its signature against the
// auditor's keys before it asks the file to hold it (ADR 36).

// publishCheckpoint puts line, a checkpoint line of log logID, into
// sbx_audit.
func publishCheckpoint(ctx context.Context, js jetstream.JetStream, logID string, line Entry) error {
	kv, err := js.KeyValue(ctx, events.BucketAudit)
	if err != nil {
		return fmt.Errorf("auditor: %s: %w", events.BucketAudit, err)
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, logID, b); err != nil {
		return fmt.Errorf("auditor: publish checkpoint: %w", err)
	}
	return nil
}

// ErrNoPublishedCheckpoint: sbx_audit holds no checkpoint for the log.
var ErrNoPublishedCheckpoint = errors.New("auditor: no checkpoint published for this log")

// FetchCheckpoint reads the latest checkpoint the auditor published for
// log logID and checks its signature (by one of auditorKeys when that is
// not empty). With logID empty it takes the only log of the bucket, and
// fails when there are several.
func FetchCheckpoint(ctx context.Context, js jetstream.JetStream, logID string, auditorKeys []string) (*Checkpoint, error) {
	kv, err := js.KeyValue(ctx, events.BucketAudit)
	if err != nil {
		return nil, fmt.Errorf("auditor: %s: %w", events.BucketAudit, err)
	}
	if logID == "" {
		keys, err := kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, ErrNoPublishedCheckpoint
		}
		if err != nil {
			return nil, fmt.Errorf("auditor: %s: %w", events.BucketAudit, err)
		}
		if len(keys) != 1 {
			return nil, fmt.Errorf("auditor: %s holds the checkpoints of %d logs (%s): the file holds no checkpoint naming its own",
				events.BucketAudit, len(keys), strings.Join(keys, ", "))
		}
		logID = keys[0]
	}
	v, err := kv.Get(ctx, logID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNoPublishedCheckpoint
	}
	if err != nil {
		return nil, fmt.Errorf("auditor: %s: %w", events.BucketAudit, err)
	}
	var e Entry
	if err := json.Unmarshal(v.Value(), &e); err != nil {
		return nil, fmt.Errorf("auditor: published checkpoint: %w", err)
	}
	cp, err := checkCheckpoint(&e, auditorKeys)
	if err != nil {
		return nil, fmt.Errorf("auditor: published checkpoint: %w", err)
	}
	if cp.Log != logID {
		return nil, fmt.Errorf("auditor: published checkpoint names log %s under key %s", cp.Log, logID)
	}
	return &cp, nil
}
