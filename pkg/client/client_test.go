package client_test

import (
	"context"
	"errors"
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
