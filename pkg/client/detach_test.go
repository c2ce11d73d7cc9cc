package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestDetachLeavesProcessRunning: a detached process is not killed; a
// later Attach sees it run to its own exit.
func TestDetachLeavesProcessRunning(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	defer env.Client.Kill(context.Background(), sb.SandboxID)
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	p, err := env.Client.Stream(sctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "4", "250"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	p.Detach()
	scancel()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := env.Client.Attach(ctx, sb.SandboxID, p.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	out, _, res := readAll(t, again)
	if res.ExitCode != 0 || res.Signal != "" || out == "" {
		t.Fatalf("after Detach: exit %d signal %q output %q, want the process's own exit", res.ExitCode, res.Signal, out)
	}
}
