package workertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// reattachAfterRestart: a worker that crashes while a client streams a
// process and comes back with the same id ends that client's stream with
// the truth. A backend that keeps processes across a restart
// (Options.Reattaches: a worker.Reattacher whose sandboxes keep them) gives the client every line exactly once, in order,
// with no gap, and the exit status; any other ends the stream with
// SBX_E1621 ProcessLost (retryable), never a hang or a silent gap. The
// sandbox itself is re-adopted either way.
func (s *suite) reattachAfterRestart(t *testing.T) {
	if s.opts.Restarted == nil {
		t.Skip("no Options.Restarted: the backend cannot be restarted by the suite")
	}
	var nb [6]byte
	_, _ = rand.Read(nb[:])
	workerID := "reattach-" + hex.EncodeToString(nb[:])
	first := s.opts.Restarted(t, workerID)
	env := sbxtest.Start(t, sbxtest.Options{Backend: first, Routing: s.opts.Routing,
		Worker: func(c *worker.Config) { c.WorkerID = workerID; c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = env.Client.Kill(kctx, sb.SandboxID)
	})
	const lines = 40
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "drip %d\n", i)
	}
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: s.cmds.Drip(lines, 50*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got strings.Builder
	for !strings.Contains(got.String(), "drip 3\n") {
		c, err := p.Next()
		if err != nil {
			t.Fatalf("stream before the restart: %v", err)
		}
		got.Write(c.Data)
	}
	env.CrashWorkers()
	second := s.opts.Restarted(t, workerID)
	reattaches := s.opts.Reattaches
	w2, err := worker.New(worker.Config{WorkerID: workerID, Bus: env.Bus, KillOnShutdown: false}, env.Conn("worker-2"), second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })

	var gaps uint64
	var end error
	for {
		c, err := p.Next()
		if err != nil {
			end = err
			break
		}
		gaps += c.Missing
		got.Write(c.Data)
	}
	res, err := p.Wait()
	if errors.Is(end, context.DeadlineExceeded) {
		t.Fatalf("the stream did not end after the restart (%q so far)", got.String())
	}
	switch {
	case reattaches:
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("re-attached stream: %+v, %v; want exit 0", res, err)
		}
		if gaps > 0 || got.String() != want.String() {
			t.Fatalf("re-attached output (%d chunks missing):\n%q\nwant\n%q", gaps, got.String(), want.String())
		}
		t.Logf("re-attached: %d lines, each once, exit %d", lines, res.ExitCode)
	default:
		if !errors.Is(err, events.ErrProcessLost) {
			t.Fatalf("stream after a restart of a backend that does not re-attach: %v, want ProcessLost", err)
		}
		if !strings.HasPrefix(want.String(), got.String()) {
			t.Fatalf("output before ProcessLost is not a prefix of the process's: %q", got.String())
		}
		t.Logf("not re-attachable: the stream ended with %v", err)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: s.cmds.Echo("ok")}); err != nil {
		t.Fatalf("exec in the re-adopted sandbox: %v", err)
	}
}
