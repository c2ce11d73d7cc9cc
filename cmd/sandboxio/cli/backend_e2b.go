package cli

import (
	"context"
	"log/slog"
	"os"

	"github.com/sandboxio/sandboxio/pkg/worker"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
)

// The E2B backend reads E2B_API_KEY, E2B_DOMAIN, E2B_API_URL and
// E2B_SANDBOX_URL as E2B's SDKs do, plus SBX_E2B_TEMPLATE,
// SBX_E2B_CODE_INTERPRETER and SBX_E2B_USER; without E2B_API_KEY it does not
// start (dev logs "backend not started" and goes on).
func init() {
	backendOpeners["e2b"] = func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error) {
		cfg := e2bworker.ConfigFromEnv(os.Getenv)
		cfg.WorkerID = workerID
		cfg.Logger = log
		b, err := e2bworker.NewBackend(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	}
}
