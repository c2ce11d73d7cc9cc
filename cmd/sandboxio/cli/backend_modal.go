package cli

import (
	"context"
	"log/slog"
	"os"

	"github.com/sandboxio/sandboxio/pkg/worker"
	modalworker "github.com/sandboxio/sandboxio/services/modal-worker"
)

// The Modal backend reads MODAL_TOKEN_ID, MODAL_TOKEN_SECRET,
// MODAL_SERVER_URL, MODAL_ENVIRONMENT, MODAL_PROFILE, MODAL_CONFIG_PATH (the
// profile file, ~/.modal.toml), MODAL_IMAGE_BUILDER_VERSION and
// MODAL_MAX_THROTTLE_WAIT as Modal's SDKs do, plus SBX_MODAL_APP and
// SBX_MODAL_IMAGE. Without a token it does not start (dev logs "backend not
// started" and goes on); a token Modal rejects stops `sandboxio
// modal-worker` with a message naming the variables.
func init() {
	backendOpeners["modal"] = func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error) {
		cfg, err := modalworker.ConfigFromEnv(os.Getenv)
		if err != nil {
			return nil, nil, err
		}
		cfg.WorkerID = workerID
		cfg.Logger = log
		b, err := modalworker.NewBackend(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	}
}
