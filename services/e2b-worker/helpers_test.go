package e2bworker_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
)

const routing = "default_class: untrusted\nclasses:\n  untrusted: {backend: e2b, template: base, require_isolation: microvm}\n"

// startFake starts a fake E2B that fails the test on any protocol deviation.
func startFake(t *testing.T) *e2bfake.Server {
	t.Helper()
	srv := e2bfake.New(e2bfake.Options{TB: t, MaxSandboxes: 100, Logger: testLogger()})
	srv.Start()
	return srv
}

func testLogger() *slog.Logger {
	if os.Getenv("E2BWORKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newBackend builds a backend configured from the fake's environment, as
// E2B's SDKs read it, with short keepalives so that stalls show quickly.
func newBackend(t *testing.T, srv *e2bfake.Server, mod func(*e2bworker.Config)) *e2bworker.Backend {
	t.Helper()
	env := srv.Env()
	cfg := e2bworker.ConfigFromEnv(func(k string) string { return env[k] })
	cfg.WorkerID = "e2bw" + events.NewID()[:12]
	cfg.CodeInterpreter = true
	cfg.KeepaliveInterval = time.Second
	cfg.StallGrace = time.Second
	cfg.CodeStallTimeout = 8 * time.Second
	cfg.RequestTimeout = 10 * time.Second
	cfg.Logger = testLogger()
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := e2bworker.NewBackend(ctx, cfg)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startEnv runs the backend behind the real runtime, router and client.
func startEnv(t *testing.T, b *e2bworker.Backend) *sbxtest.Env {
	t.Helper()
	return sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: routing})
}

// e2bCommands are the shell probes for E2B. One differs from
// workertest.ShellCommands: the fake runs processes on the host in a
// directory that stands for the sandbox's "/", so pwd prints
// <dir>/tmp where envd in a real sandbox prints /tmp (a documented
// limitation of e2bfake). The Pwd probe strips that prefix, which it finds
// from $HOME (<dir>/root or <dir>/home/user); on a real sandbox the prefix
// is empty and the probe is plain pwd. The suite's check is unchanged: the
// process must run in the requested cwd.
var e2bCommands = func() workertest.Commands {
	c := workertest.ShellCommands
	c.Pwd = []string{"sh", "-c", `r=${HOME%/root}; r=${r%/home/user}; p=$(pwd -P); printf '%s\n' "${p#"$r"}"`}
	return c
}()

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
