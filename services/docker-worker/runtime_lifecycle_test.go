//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

const lifecycleRouting = `default_class: base
classes:
  base: {backend: docker, image: "sandboxio/base:latest"}
  hardened: {backend: docker, image: "sandboxio/base:latest", runtime: runsc}
`

// TestContainerKilledFromOutside: a container killed behind the worker's
// back (docker kill) is noticed from the daemon's events: its running
// execs, buffered and streamed, fail with SandboxGone within a second and
// the registry says gone. Under runc and, where registered, runsc.
func TestContainerKilledFromOutside(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
	classes := []string{"base"}
	if _, ok := b.RuntimeTier(RuntimeRunsc); ok {
		classes = append(classes, "hardened")
	}
	for _, class := range classes {
		t.Run(class, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120, Class: class})
			if err != nil {
				t.Fatal(err)
			}
			stream, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", "echo started; exec sleep 600"}})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if c, err := stream.Next(); err != nil || string(c.Data) != "started\n" {
				t.Fatalf("stream: %q %v", c.Data, err)
			}
			buffered := make(chan error, 1)
			go func() {
				_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "600"}})
				buffered <- err
			}()
			eventually(t, 10*time.Second, "the buffered sleep running", func() bool {
				r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", "ps -o args | grep -c '^sleep 600'"}})
				return err == nil && string(r.Stdout) == "2\n"
			})
			killed := time.Now()
			if err := rawDocker(t).ContainerKill(ctx, namePrefix+sb.SandboxID, "KILL"); err != nil {
				t.Fatalf("docker kill: %v", err)
			}
			for name, got := range map[string]func() error{
				"buffered": func() error { return <-buffered },
				"streamed": func() error { _, err := stream.Wait(); return err },
			} {
				err := got()
				took := time.Since(killed)
				if !errors.Is(err, events.ErrSandboxGone) {
					t.Errorf("%s exec in a killed container: %v, want SandboxGone", name, err)
				}
				if took > 2*time.Second {
					t.Errorf("%s exec ended %s after the container died, want within about a second", name, took)
				}
				t.Logf("%s exec ended %s after docker kill: %v", name, took.Round(time.Millisecond), err)
			}
			eventually(t, 5*time.Second, "registry says gone", func() bool {
				rec, err := env.Client.Get(ctx, sb.SandboxID)
				return err == nil && rec.State == events.StateGone
			})
			if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); !errors.Is(err, events.ErrSandboxGone) {
				t.Errorf("exec after the death: %v, want SandboxGone", err)
			}
			eventually(t, 10*time.Second, "the dead container removed", func() bool {
				_, err := b.cli.ContainerInspect(ctx, namePrefix+sb.SandboxID)
				return err != nil
			})
		})
	}
}

// rawDocker is a plain Docker client, for what the backend never does
// (docker kill).
func rawDocker(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
