//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

const (
	baseImage   = "sandboxio/base:latest"
	pythonImage = "sandboxio/python:3.11"
)

// needDocker skips the test when no Docker daemon answers, and fails it when
// the images of deploy/images/build.sh are missing.
func needDocker(t testing.TB) {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no docker daemon reachable: %v", err)
	}
	for _, img := range []string{baseImage, pythonImage} {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			t.Fatalf("image %s missing (run deploy/images/build.sh): %v", img, err)
		}
	}
}

func randID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SBX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newTestBackend makes a backend with its own worker id and removes everything
// it created when the test ends.
func newTestBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	needDocker(t)
	if cfg.WorkerID == "" {
		cfg.WorkerID = randID("test-")
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := NewBackend(ctx, cfg)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		list, err := b.ListSandboxes(ctx)
		if err != nil {
			t.Errorf("cleanup list: %v", err)
		}
		for _, l := range list {
			if err := b.Kill(ctx, l.SandboxID); err != nil {
				t.Errorf("cleanup kill %s: %v", l.SandboxID, err)
			}
		}
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

type createOpt func(*worker.CreateSpec)

func withImage(img string) createOpt { return func(s *worker.CreateSpec) { s.Spec.Image = img } }
func withResources(r events.Resources) createOpt {
	return func(s *worker.CreateSpec) { s.Resources = r }
}
func withNetwork(n events.NetworkPolicy) createOpt {
	return func(s *worker.CreateSpec) { s.Network = n }
}
func withReadOnly() createOpt { return func(s *worker.CreateSpec) { s.Spec.ReadOnlyRoot = true } }

func newSpec(opts ...createOpt) worker.CreateSpec {
	s := worker.CreateSpec{
		SandboxID: randID("sb-"),
		Owner:     "tester",
		Spec:      events.ClassSpec{Name: "standard", Backend: "docker", Image: baseImage},
		Deadline:  time.Now().Add(10 * time.Minute).UTC().Truncate(time.Second),
		Metadata:  map[string]string{"team": "qa"},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

func mustCreate(t testing.TB, b *Backend, opts ...createOpt) string {
	t.Helper()
	spec := newSpec(opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return spec.SandboxID
}

type result struct {
	stdout, stderr string
	status         worker.ExitStatus
}

func run(t testing.TB, b *Backend, id string, p worker.Process) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	p.Stdout, p.Stderr = &out, &errb
	st, err := b.Exec(ctx, id, p)
	if err != nil {
		t.Fatalf("Exec %q: %v (stdout %q stderr %q)", p.Cmd, err, out.String(), errb.String())
	}
	return result{out.String(), errb.String(), st}
}

func sh(t testing.TB, b *Backend, id, script string) string {
	t.Helper()
	r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", script}})
	if r.status.Code != 0 {
		t.Fatalf("sh %q: exit %d, stderr %q", script, r.status.Code, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, d, poll.Bool(what, cond))
}
