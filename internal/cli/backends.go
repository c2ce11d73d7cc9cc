package cli

import (
	"context"
	"log/slog"

	"github.com/sandboxio/sandboxio/pkg/worker"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

func init() {
	backendOpeners["docker"] = func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error) {
		b, err := dockerworker.NewBackend(ctx, dockerworker.Config{WorkerID: workerID, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	}
}
