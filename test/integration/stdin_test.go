//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestDockerLargeStdinToSlowReader (issue 9 item 9): 4 MB of stdin for a
// process that starts reading only after 2 s (as `exec -i < file` feeds
// `sh -c 'sleep 2; wc -c'`) fills the worker's queue of unread writes; the
// client's StdinWriter waits on Overloaded instead of giving up, so every
// byte arrives and the process ends — no stall until the deadline.
func TestDockerLargeStdinToSlowReader(t *testing.T) {
	dockerClient(t)
	wid := "stdin-" + events.NewID()[:8]
	b := newDockerBackend(t, wid)
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: dockerRouting, Logger: testLogger(),
		Worker: func(c *worker.Config) { c.WorkerID = wid }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), sb.SandboxID) }()
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", "sleep 2; wc -c"}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const total = 4 << 20
	w := env.Client.Stdin(ctx, sb.SandboxID, p.ProcessID)
	data := bytes.Repeat([]byte("x"), 32<<10)
	for sent := 0; sent < total; sent += len(data) {
		if _, err := w.Write(data); err != nil {
			t.Fatalf("stdin after %d bytes: %v", sent, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		c, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		out.Write(c.Data)
	}
	if got := strings.TrimSpace(out.String()); got != "4194304" {
		t.Fatalf("the process counted %q bytes, want 4194304", got)
	}
}
