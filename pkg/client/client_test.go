package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestRequestTimeoutKillsTheProcess: when the client gives up on its own
// request timeout, the remote process is killed too.
func TestRequestTimeoutKillsTheProcess(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	cl, err := client.New(env.Conn("short"), client.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sb := env.Create(context.Background())
	_, err = cl.Exec(context.Background(), events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "long", Cmd: []string{"sleep", "60000"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec past the request timeout: %v", err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		err := env.Client.Signal(context.Background(), sb.SandboxID, "long", "KILL")
		return errors.Is(err, events.ErrProcessNotFound)
	}, "the process outlived the abandoned exec")
}

// TestStreamEndsWhenItsWorkerIsLost: a reader without a deadline gets
// SandboxGone instead of waiting forever for an exit marker.
func TestStreamEndsWhenItsWorkerIsLost(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(context.Background())
	p, err := env.Client.Stream(context.Background(), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "600000"}})
	if err != nil {
		t.Fatal(err)
	}
	env.CrashWorkers()
	done := make(chan error, 1)
	go func() { _, err := p.Wait(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Fatalf("Wait after the worker was lost: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait hung after the worker was lost")
	}
}

// TestStreamSurvivesServerRestart: a reader reconnects and replays from the
// stream; every line arrives once and in order.
func TestStreamSurvivesServerRestart(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	const lines = 30
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", fmt.Sprint(lines), "100"}})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	restarted := false
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Missing != 0 {
			t.Fatalf("gap of %d chunks before seq %d", c.Missing, c.Seq)
		}
		got.Write(c.Data)
		if !restarted && strings.Count(got.String(), "\n") >= 5 {
			restarted = true
			env.RestartServer()
		}
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "drip %d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("output across a restart:\n%q\nwant\n%q", got.String(), want.String())
	}
}

// TestCreateProgress: progress a backend reports during a create (an image
// pull) reaches the client that is waiting for it.
func TestCreateProgress(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Routing: "default_class: pull\nclasses:\n  pull: {backend: fake, image: pull-progress}\n"})
	var mu sync.Mutex
	var got []string
	sb, err := env.Client.CreateWatch(context.Background(), events.CreateRequest{TimeoutS: 60}, func(msg string) {
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Client.Kill(context.Background(), sb.SandboxID)
	// Core messages may trail the reply by a moment.
	sbxtest.Eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 }, "progress: %v", got)
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "pulling image pull-progress" || got[2] != "pulled image pull-progress" {
		t.Fatalf("progress: %q", got)
	}
}
