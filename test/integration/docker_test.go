//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
	"github.com/sandboxio/sandboxio/services/reaper"
)

const dockerRouting = `default_class: base
classes:
  base: {backend: docker, image: "sandboxio/base:latest"}
`

// dockerClient skips the test when no Docker daemon answers.
func dockerClient(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("no docker daemon reachable: %v", err)
	}
	if _, err := cli.ImageInspect(ctx, "sandboxio/base:latest"); err != nil {
		t.Fatalf("image sandboxio/base:latest missing (run deploy/images/build.sh): %v", err)
	}
	return cli
}

func newDockerBackend(t *testing.T, workerID string) *dockerworker.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := dockerworker.NewBackend(ctx, dockerworker.Config{WorkerID: workerID, Logger: testLogger()})
	if err != nil {
		t.Fatalf("docker backend: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// crashable is a docker backend whose process "dies": once crashed it
// removes nothing, as a worker process that is gone would not.
type crashable struct {
	*dockerworker.Backend
	crashed atomic.Bool
}

func (c *crashable) Kill(ctx context.Context, id string) error {
	if c.crashed.Load() {
		return errors.New("worker process is dead")
	}
	return c.Backend.Kill(ctx, id)
}

// containers lists the containers labelled as sandboxes of one worker.
func containers(t *testing.T, cli *dockerclient.Client, workerID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", dockerworker.LabelSandbox),
		filters.Arg("label", dockerworker.LabelWorker+"="+workerID))})
	if err != nil {
		t.Fatalf("container list: %v", err)
	}
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, c.Labels[dockerworker.LabelSandbox]+" ("+c.State+")")
	}
	return out
}

// registry returns every sandbox record.
func registry(t *testing.T, js jetstream.JetStream) map[string]events.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	out := map[string]events.Sandbox{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatalf("registry keys: %v", err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		var sb events.Sandbox
		if err := json.Unmarshal(e.Value(), &sb); err != nil {
			t.Fatalf("registry %s: %v", k, err)
		}
		out[k] = sb
	}
	return out
}

// startedStream starts `echo started; sleep 30` streamed and returns once
// the process has printed, so it is certainly running.
func startedStream(ctx context.Context, t *testing.T, env *sbxtest.Env, id string) {
	t.Helper()
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"sh", "-c", "echo started; sleep 30"}})
	if err != nil {
		t.Fatalf("stream in %s: %v", id, err)
	}
	c, err := p.Next()
	if err != nil || !strings.Contains(string(c.Data), "started") {
		t.Fatalf("stream in %s: %q %v", id, c.Data, err)
	}
}

// TestDockerNoLeaks: with real containers, short lifetimes and a reaper,
// cancel a client mid-exec, crash the worker (its successor with the same id
// must clean up), and stop the router mid-operation; once the deadlines and
// the grace have passed no container of the worker is left and every sandbox
// in the registry has ended.
func TestDockerNoLeaks(t *testing.T) {
	cli := dockerClient(t)
	wid := events.NewID()
	crash := &crashable{Backend: newDockerBackend(t, wid)}
	log := testLogger()
	env := sbxtest.Start(t, sbxtest.Options{Backend: crash, Routing: dockerRouting, Logger: log,
		Worker: func(c *worker.Config) { c.WorkerID, c.KillOnShutdown = wid, false }})
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	startReaper(t, env.Conn("reaper"), reaper.Config{Logger: log, Interval: time.Second, LeaderTTL: time.Second, SigningSeed: env.SigningSeed(auth.ReaperSigner),
		CreationGrace: 2 * time.Second, KillTimeout: 5 * time.Second})
	t.Cleanup(func() { // whatever happens, leave nothing behind
		for _, c := range containers(t, cli, wid) {
			id := strings.Fields(c)[0]
			_ = cli.ContainerRemove(context.Background(), "sbx-"+id, container.RemoveOptions{Force: true})
		}
	})

	const lifetime = 5 // seconds
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(ctx context.Context) (string, error) {
		r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: lifetime})
		if err != nil {
			return "", err
		}
		return r.SandboxID, nil
	}
	mustCreate := func() string {
		t.Helper()
		id, err := create(ctx)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return id
	}
	var bg sync.WaitGroup
	defer bg.Wait()

	// (a) A client cancelled mid-exec: the process is killed.
	a := mustCreate()
	actx, acancel := context.WithCancel(ctx)
	bg.Add(1)
	go func() {
		defer bg.Done()
		_, err := env.Client.Exec(actx, events.ExecRequest{SandboxID: a, Cmd: []string{"sh", "-c", "touch /tmp/started; exec sleep 30"}})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled exec: want context.Canceled, got %v", err)
		}
	}()
	execCode := func(cmd ...string) int {
		r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: a, Cmd: cmd})
		if err != nil {
			return -1
		}
		return r.ExitCode
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return execCode("test", "-e", "/tmp/started") == 0 },
		"the exec never started")
	acancel()
	sbxtest.Eventually(t, 10*time.Second, func() bool { return execCode("sh", "-c", "ps -o args | grep -q '^sleep 30'") == 1 },
		"the cancelled exec's process still runs")

	// (b) The worker crashes with sandboxes and an exec in flight.
	b1, b2 := mustCreate(), mustCreate()
	startedStream(ctx, t, env, b1)
	bg.Add(1)
	go func() {
		defer bg.Done()
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: b2, Cmd: []string{"sleep", "30"}})
		t.Logf("exec on the crashed worker: %v", err)
	}()
	crash.crashed.Store(true)
	env.CrashWorkers()
	sbxtest.Eventually(t, 30*time.Second, func() bool {
		reg := registry(t, js)
		return reg[b1].State.Ended() && reg[b2].State.Ended()
	}, "the reaper never marked the crashed worker's sandboxes ended")
	if left := containers(t, cli, wid); len(left) == 0 {
		t.Fatalf("the crash left no container: the test would prove nothing")
	}

	// A successor with the same worker id reconciles its labelled containers.
	w2, err := worker.New(worker.Config{WorkerID: wid, Bus: env.Bus, Logger: log}, env.Conn("worker-2"), newDockerBackend(t, wid))
	if err != nil {
		t.Fatal(err)
	}
	runService(t, w2.Run)
	env.WaitForBackend("docker")
	sbxtest.Eventually(t, 30*time.Second, func() bool {
		for _, c := range containers(t, cli, wid) {
			if id := strings.Fields(c)[0]; id == b1 || id == b2 {
				return false
			}
		}
		return true
	}, "the successor worker left the crashed worker's containers: %v", containers(t, cli, wid))

	// (c) The router stops mid-operation: an exec running, another waiting
	// for its reply, a create in flight.
	c1 := mustCreate()
	startedStream(ctx, t, env, c1)
	bg.Add(2)
	go func() {
		defer bg.Done()
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: c1, Cmd: []string{"sleep", "30"}})
		t.Logf("exec when the router stopped: %v", err)
	}()
	go func() {
		defer bg.Done()
		id, err := create(ctx)
		t.Logf("create when the router stopped: %s %v", id, err)
	}()
	sbxtest.Eventually(t, 10*time.Second, func() bool { // the create reached the worker
		return len(registry(t, js)) >= 5
	}, "the in-flight create never reached the registry")
	env.StopRouters()
	bg.Wait()

	// Deadlines + grace: nothing is left.
	sbxtest.Eventually(t, 60*time.Second, func() bool {
		if len(containers(t, cli, wid)) > 0 {
			return false
		}
		for _, sb := range registry(t, js) {
			if !sb.State.Ended() {
				return false
			}
		}
		return true
	}, "leak: containers %v, registry %s", containers(t, cli, wid), fmt.Sprint(liveIn(registry(t, js))))
	t.Logf("registry: %v", states(registry(t, js)))
}

func liveIn(reg map[string]events.Sandbox) []string {
	var out []string
	for id, sb := range reg {
		if !sb.State.Ended() {
			out = append(out, id+"="+string(sb.State))
		}
	}
	return out
}

func states(reg map[string]events.Sandbox) map[string]string {
	out := map[string]string{}
	for id, sb := range reg {
		out[id] = string(sb.State) + " (" + sb.EndReason + ")"
	}
	return out
}
