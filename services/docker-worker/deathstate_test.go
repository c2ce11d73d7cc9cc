//go:build integration

package dockerworker

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/pkg/client"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestSandboxDeathsReachTheRegistry: however a sandbox dies behind the
// worker's back — its agent (PID 1) killed from the host, its container
// removed, an OOM — get (what MCP's list_sandboxes shows) stops saying
// running within a bound while Docker no longer runs it, and says running
// only while Docker does (issue 22, D.21).
func TestSandboxDeathsReachTheRegistry(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
	for _, tc := range []struct {
		name     string
		class    string
		survives bool
		kill     func(t *testing.T, ctx context.Context, sb *client.Sandbox)
	}{
		{"agent killed from the host", "base", false, func(t *testing.T, ctx context.Context, sb *client.Sandbox) {
			if pid := agentHostPID(t, b, sb.SandboxID); pid > 0 {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"container removed", "base", false, func(t *testing.T, ctx context.Context, sb *client.Sandbox) {
			if err := rawDocker(t).ContainerRemove(ctx, namePrefix+sb.SandboxID, container.RemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}},
		{"memory bomb", "base", true, func(t *testing.T, ctx context.Context, sb *client.Sandbox) {
			r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, TimeoutMS: 60000,
				Cmd: []string{"sh", "-c", "x=aaaaaaaaaaaaaaaa; while :; do x=$x$x; done"}})
			t.Logf("memory bomb: %+v %v", r, err)
		}},
		{"memory bomb on gVisor", "hardened", false, func(t *testing.T, ctx context.Context, sb *client.Sandbox) {
			r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, TimeoutMS: 60000,
				Cmd: []string{"sh", "-c", "x=aaaaaaaaaaaaaaaa; while :; do x=$x$x; done"}})
			t.Logf("memory bomb: %+v %v", r, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := b.RuntimeTier(RuntimeRunsc); tc.class == "hardened" && !ok {
				t.Skip("runsc is not registered with the daemon")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300, Class: tc.class, Resources: &events.Resources{MemoryMB: 128}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = env.Client.Kill(context.WithoutCancel(ctx), sb.SandboxID) }()
			tc.kill(t, ctx, sb)
			dockerRunning := func() bool {
				c, err := rawDocker(t).ContainerInspect(ctx, namePrefix+sb.SandboxID)
				return err == nil && c.State != nil && c.State.Running
			}
			if tc.survives {
				if r, err := env.Client.Get(ctx, sb.SandboxID); err != nil || r.State != events.StateRunning || !dockerRunning() {
					t.Fatalf("a sandbox that survived: get %+v %v, docker running %v", r, err, dockerRunning())
				}
				if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil {
					t.Fatalf("exec in a sandbox get says running: %v", err)
				}
				return
			}
			eventually(t, 20*time.Second, "Docker no longer running the sandbox", func() bool { return !dockerRunning() })
			dead := time.Now()
			var last string
			eventually(t, 20*time.Second, "get saying the sandbox ended", func() bool {
				r, err := env.Client.Get(ctx, sb.SandboxID)
				if err != nil {
					last = err.Error()
					return false
				}
				last = fmt.Sprintf("%s %s", r.State, r.EndReason)
				return r.State.Ended()
			})
			t.Logf("get: %s, %v after Docker stopped running it", last, time.Since(dead).Round(time.Millisecond))
		})
	}
}

// TestWorkerStoppedAndTheRegistry: a worker that stops (gracefully: it
// kills its sandboxes) leaves no sandbox that get says is running (issue
// 22, D.21).
func TestWorkerStoppedAndTheRegistry(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = rawDocker(t).ContainerRemove(context.WithoutCancel(ctx), namePrefix+sb.SandboxID, container.RemoveOptions{Force: true})
	}()
	env.StopWorkers(30 * time.Second)
	var last string
	eventually(t, 20*time.Second, "get saying the sandbox ended and Docker not running it", func() bool {
		r, err := env.Client.Get(ctx, sb.SandboxID)
		c, ierr := rawDocker(t).ContainerInspect(ctx, namePrefix+sb.SandboxID)
		running := ierr == nil && c.State != nil && c.State.Running
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("get %s %s, docker running %v", r.State, r.EndReason, running)
		return r.State.Ended() && !running
	})
	t.Log(last)
}
