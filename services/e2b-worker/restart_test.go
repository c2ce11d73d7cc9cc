package e2bworker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
)

// TestRestartKillsLostProcesses: envd keeps a process running when its
// stream breaks, but it cannot replay the output written while nobody was
// connected, so a worker restarted with the same id ends the process as
// lost (SBX_E1621). The process and the children it left must not run on
// in the sandbox, out of anybody's sight.
func TestRestartKillsLostProcesses(t *testing.T) {
	srv := startFake(t)
	const workerID = "e2b-restart"
	restarted := func(t *testing.T) worker.Backend {
		return newBackend(t, srv, func(c *e2bworker.Config) { c.WorkerID = workerID })
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: restarted(t), Routing: routing,
		Worker: func(c *worker.Config) { c.WorkerID = workerID; c.KillOnShutdown = false }})
	ctx := ctxT(t, 2*time.Minute)
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = env.Client.Kill(context.Background(), sb.SandboxID) })
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID,
		Cmd: []string{"sh", "-c", `sleep 120 & a=$!; setsid sleep 120 & b=$!; echo "$$ $a $b"; wait`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out strings.Builder
	for !strings.HasSuffix(out.String(), "\n") {
		c, err := p.Next()
		if err != nil {
			t.Fatalf("waiting for the pids: %v (%q)", err, out.String())
		}
		out.Write(c.Data)
	}
	pids := strings.Fields(out.String())
	env.CrashWorkers()
	w2, err := worker.New(worker.Config{WorkerID: workerID, Bus: env.Bus, KillOnShutdown: false}, env.Conn("worker-2"), restarted(t))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })
	for {
		if _, err := p.Next(); err != nil {
			break
		}
	}
	if _, err := p.Wait(); !errors.Is(err, events.ErrProcessLost) {
		t.Fatalf("stream after the restart: %v, want ProcessLost", err)
	}
	for _, pid := range pids {
		alive := []string{"sh", "-c", `[ -d /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status`, "sh", pid}
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: alive})
			return err == nil && res.ExitCode != 0
		}, "process %s of the lost exec still runs in the sandbox", pid)
	}
}

// TestRestartAnswersBufferedExecs: a buffered exec in flight when its
// worker crashed gets SBX_E1621 ProcessLost as soon as the worker restarted
// with the same id re-adopts the sandbox (not the router's timer), and its
// process does not run on in the sandbox (before Abandon, envd kept it
// running).
func TestRestartAnswersBufferedExecs(t *testing.T) {
	srv := startFake(t)
	const workerID = "e2b-restart-buffered"
	restarted := func(t *testing.T) worker.Backend {
		return newBackend(t, srv, func(c *e2bworker.Config) { c.WorkerID = workerID })
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: restarted(t), Routing: routing,
		Worker: func(c *worker.Config) { c.WorkerID = workerID; c.KillOnShutdown = false }})
	ctx := ctxT(t, 2*time.Minute)
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = env.Client.Kill(context.Background(), sb.SandboxID) })
	answered := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID,
			Cmd: []string{"sh", "-c", `echo $$ > "$HOME/started"; exec sleep 110`}})
		answered <- err
	}()
	var pid string
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", `cat "$HOME/started"`}})
		pid = strings.TrimSpace(string(res.Stdout))
		return err == nil && res.ExitCode == 0 && pid != ""
	}, "the buffered exec never started")
	env.CrashWorkers()
	w2, err := worker.New(worker.Config{WorkerID: workerID, Bus: env.Bus, KillOnShutdown: false}, env.Conn("worker-2"), restarted(t))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	restart := time.Now()
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })
	select {
	case err := <-answered:
		if !errors.Is(err, events.ErrProcessLost) {
			t.Fatalf("buffered exec across the restart: %v, want ProcessLost", err)
		}
		t.Logf("answered %v after the restart", time.Since(restart))
	case <-time.After(15 * time.Second):
		t.Fatal("the buffered exec was not answered within 15 s of the restart")
	}
	alive := []string{"sh", "-c", `[ -d /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status`, "sh", pid}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: alive})
		return err == nil && res.ExitCode != 0
	}, "process %s of the lost exec still runs in the sandbox", pid)
}
