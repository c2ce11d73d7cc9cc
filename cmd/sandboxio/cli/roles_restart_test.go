//go:build integration

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

// role runs one `sandboxio ROLE ...` in the test until stop is called,
// which fails the test when the role exits non-zero or does not stop in
// time.
func role(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	errb := &sbxtest.Buffer{}
	go func() { done <- run(ctx, "sandboxio", append(args, "--log-level", "error"), &sbxtest.Buffer{}, errb) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("%v exited %d: %s", args, code, errb.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("%v did not stop within 60s", args)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestDockerWorkerRestartReadopts: `sandboxio docker-worker --worker-id W`
// stopped and started again with the same id (split mode: its sandboxes
// outlive it) re-adopts its sandbox: exec works after the restart, and get
// and exec agree that it is running. Before the backend was opened with the
// flag's id, its containers carried another worker label and every exec
// after a restart got SBX_E1204 "not held by worker".
func TestDockerWorkerRestartReadopts(t *testing.T) {
	docker, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	defer docker.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = docker.Ping(pctx)
	pcancel()
	if err != nil {
		t.Skipf("no docker daemon: %v", err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	wid := "restart-" + hex.EncodeToString(rnd[:])
	t.Cleanup(func() { // whatever happens, leave no container of this worker
		list, _ := docker.ContainerList(context.Background(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", dockerworker.LabelWorker+"="+wid))})
		for _, c := range list {
			_ = docker.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
	})

	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url := srv.ClientURL()
	routing := filepath.Join(t.TempDir(), "routing.yaml")
	if err := os.WriteFile(routing, []byte("default_class: base\nclasses:\n  base: {backend: docker, image: \"sandboxio/base:latest\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	role(t, "router", "--nats", url, "--routing", routing)
	stopWorker := role(t, "docker-worker", "--nats", url, "--worker-id", wid)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var sb *events.CreateReply
	poll.Eventually(t, 30*time.Second, func() error { // the worker's lease reaches the router
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		sb, err = cl.Create(cctx, events.CreateRequest{TimeoutS: 180})
		return err
	})
	echo := func() (string, error) {
		r, err := cl.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "alive"}})
		if err != nil {
			return "", err
		}
		return string(r.Stdout), nil
	}
	if out, err := echo(); err != nil || out != "alive\n" {
		t.Fatalf("exec before the restart: %q %v", out, err)
	}

	stopWorker()
	role(t, "docker-worker", "--nats", url, "--worker-id", wid)
	poll.Eventually(t, 30*time.Second, func() error {
		_, err := echo()
		return err
	})
	rec, err := cl.Get(ctx, sb.SandboxID)
	if err != nil || rec.State != events.StateRunning || rec.Worker != wid {
		t.Fatalf("get after the restart: %+v %v", rec, err)
	}
	if out, err := echo(); err != nil || out != "alive\n" {
		t.Fatalf("get says running, exec says %q %v", out, err)
	}
	if _, err := cl.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatalf("kill after the restart: %v", err)
	}
	if _, err := docker.ContainerInspect(ctx, "sbx-"+sb.SandboxID); err == nil {
		t.Error("the container is still there after the kill")
	}
}
