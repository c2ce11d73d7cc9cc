package cli

import (
	"context"
	"log/slog"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

// openBackendAs is openBackend with the worker id fixed by the caller
// (--worker-id): backends that tag what they create with the worker id
// (e2b metadata, Modal tags, Docker labels) must use the id the runtime
// runs under, or a restarted worker would neither list nor re-adopt its
// sandboxes. An empty workerID generates one, as openBackend does.
func openBackendAs(ctx context.Context, name, workerID string, log *slog.Logger) (worker.Backend, func(), string, error) {
	if workerID == "" {
		return openBackend(ctx, name, log)
	}
	if open, ok := backendOpeners[name]; ok {
		b, closeFn, err := open(ctx, workerID, log)
		return b, closeFn, workerID, err
	}
	b, closeFn, _, err := openBackend(ctx, name, log)
	return b, closeFn, workerID, err
}
