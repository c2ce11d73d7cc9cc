//go:build integration

package dockerworker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/poll"

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

// TestWorkerEndedSandboxReachesRegistry: a sandbox that the worker ends
// itself (its agent broke the protocol) or whose agent died (SIGQUIT: the
// Go runtime exits with code 2) reaches the registry and the records as
// any other end: `get` says gone with the reason, the kill record carries
// it, and the tenant's quota counts the sandbox no more. Before, the
// protocol kill left it running in the registry until its deadline.
func TestWorkerEndedSandboxReachesRegistry(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t), Auth: true})
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, id string)
		reason string
	}{
		{"protocol-violation", func(t *testing.T, id string) {
			writeIntoAgentSocket(t, b, id, []byte("not a frame, not at all"))
		}, "agent broke the protocol"},
		{"agent-exited", func(t *testing.T, id string) {
			// The agent is PID 1 and drops what the sandbox can send it
			// (ADR 29): killed from the host.
			if pid := agentHostPID(t, b, id); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}, "agent exited: code 137 (signal SIGKILL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			before := sandboxesInUse(ctx, t, env)
			sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the quota counting the sandbox", func() bool { return sandboxesInUse(ctx, t, env) == before+1 })
			tc.end(t, sb.SandboxID)
			var rec *events.Sandbox
			eventually(t, 15*time.Second, "the registry saying gone", func() bool {
				r, err := env.Client.Get(ctx, sb.SandboxID)
				rec = r
				return err == nil && r.State.Ended()
			})
			t.Logf("get: state %s, end reason %q", rec.State, rec.EndReason)
			if !strings.Contains(rec.EndReason, tc.reason) {
				t.Errorf("end reason %q, want it to say %q", rec.EndReason, tc.reason)
			}
			eventually(t, 10*time.Second, "the quota no longer counting it", func() bool { return sandboxesInUse(ctx, t, env) == before })
			if got := killReason(t, env, sb.SandboxID); !strings.Contains(got, tc.reason) {
				t.Errorf("kill record's reason %q, want it to say %q", got, tc.reason)
			}
		})
	}
}

// sandboxesInUse is the test tenant's live sandboxes as its quota counts them.
func sandboxesInUse(ctx context.Context, t *testing.T, env *sbxtest.Env) int {
	t.Helper()
	q, err := env.Client.Quota(ctx)
	if err != nil {
		t.Fatalf("quota: %v", err)
	}
	return q.Usage.Sandboxes
}

// killReason is the reason in the sandbox's closed kill record on SBX_OPS,
// waited for.
func killReason(t *testing.T, env *sbxtest.Env, id string) string {
	t.Helper()
	js, err := jetstream.New(env.Conn("records"))
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	poll.Eventually(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.OpsSubject("docker", id, events.EventClosed)}})
		if err != nil {
			return err
		}
		batch, err := cons.FetchNoWait(64)
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			env, err := cemsg.Decode(m.Headers(), m.Data())
			var rec events.OpRecord
			if err == nil && json.Unmarshal(env.Data, &rec) == nil && rec.Kind == events.OpKill {
				reason = rec.Summary["reason"]
				return nil
			}
		}
		return errors.New("no closed kill record")
	})
	return reason
}
