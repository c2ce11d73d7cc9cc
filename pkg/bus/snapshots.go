package bus

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// ReadSnapshotManifest reads a complete snapshot's manifest from the
// snapshot store: SnapshotNotFound when there is none (a snapshot is
// complete only once its manifest is stored, last), SnapshotIncomplete when
// it is damaged, BackendUnavailable when the store cannot be read.
func ReadSnapshotManifest(ctx context.Context, st jetstream.ObjectStore, id string) (events.SnapshotManifest, *events.Error) {
	var m events.SnapshotManifest
	b, err := st.GetBytes(ctx, events.SnapshotManifestName(id))
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return m, events.Errorf(events.CodeSnapshotNotFound, "no complete snapshot %s", id).With("snapshot_id", id)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return m, events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s: its manifest does not match its checksum", id).With("snapshot_id", id)
	case err != nil:
		return m, events.Errorf(events.CodeBackendUnavailable, "snapshot store: %v", err)
	}
	if json.Unmarshal(b, &m) != nil {
		return m, events.Errorf(events.CodeSnapshotIncomplete, "snapshot %s: unreadable manifest", id).With("snapshot_id", id)
	}
	return m, nil
}
