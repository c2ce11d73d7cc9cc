package modalworker_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	modalworker "github.com/sandboxio/sandboxio/services/modal-worker"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

const routing = "default_class: modal\nclasses:\n  modal: {backend: modal, image: \"python:3.12-slim\", require_isolation: gvisor}\n"

// startFake starts a fake Modal that fails the test on any protocol
// deviation or leak.
func startFake(t *testing.T, opts modalfake.Options) *modalfake.Server {
	t.Helper()
	opts.TB = t
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	srv := modalfake.New(opts)
	srv.Start()
	t.Logf("modalfake jail mode: %s", modalfake.DetectJail())
	return srv
}

func testLogger() *slog.Logger {
	if os.Getenv("MODALWORKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newBackend builds a backend configured from the fake's environment, as
// Modal's SDKs read it.
func newBackend(t *testing.T, srv *modalfake.Server, mod func(*modalworker.Config)) *modalworker.Backend {
	t.Helper()
	b, err := openBackend(t, srv, mod)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	return b
}

func openBackend(t *testing.T, srv *modalfake.Server, mod func(*modalworker.Config)) (*modalworker.Backend, error) {
	t.Helper()
	env := srv.Env()
	cfg, err := modalworker.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.WorkerID = "modalw" + events.NewID()[:12]
	cfg.RequestTimeout = 10 * time.Second
	cfg.KillTimeout = 5 * time.Second
	cfg.DrainTimeout = 2 * time.Second
	cfg.PollInterval = 20 * time.Millisecond
	cfg.Logger = testLogger()
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := modalworker.NewBackend(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, nil
}

// startEnv runs the backend behind the real runtime, router and client.
func startEnv(t *testing.T, b *modalworker.Backend) *sbxtest.Env {
	t.Helper()
	return sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: routing})
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
