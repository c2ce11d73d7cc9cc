//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Issue 10: PTYs through the agent: a terminal of the asked size, stderr on
// it, resize, and an interactive Python prompt whose output arrives before
// the process exits.
func TestPTY(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withImage(pythonImage))
	ctx := context.Background()
	r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "tty; stty size; echo err >&2"}, TTY: true, Rows: 40, Cols: 120})
	if !strings.Contains(r.stdout, "/dev/pts/") || !strings.Contains(r.stdout, "40 120") || !strings.Contains(r.stdout, "err") || r.stderr != "" {
		t.Fatalf("tty: out %q err %q", r.stdout, r.stderr)
	}

	// Resize a running process's terminal.
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, id, worker.Process{ID: "p-resize", Cmd: []string{"sh", "-c", "read x; stty size"}, TTY: true, Stdin: pr, Stdout: &out})
		done <- err
	}()
	eventually(t, 10*time.Second, "process on its tty", func() bool {
		return b.Resize(ctx, id, "p-resize", 30, 100) == nil
	})
	_, _ = pw.Write([]byte("\n"))
	if err := <-done; err != nil || !strings.Contains(out.String(), "30 100") {
		t.Fatalf("after resize: %q %v", out.String(), err)
	}
	if err := b.Resize(ctx, id, "p-none", 30, 100); !errors.Is(err, events.ErrPTYNotFound) {
		t.Fatalf("resize of no process: %v", err)
	}

	// An interactive prompt, answered before exit.
	pr, pw = io.Pipe()
	var py syncBuffer
	go func() {
		_, err := b.Exec(ctx, id, worker.Process{Cmd: []string{"python3"}, TTY: true, Stdin: pr, Stdout: &py})
		done <- err
	}()
	eventually(t, 15*time.Second, "python prompt", func() bool { return strings.Contains(py.String(), ">>> ") })
	_, _ = pw.Write([]byte("print(6*7)\n"))
	eventually(t, 10*time.Second, "answer before exit", func() bool { return strings.Contains(py.String(), "42") })
	_, _ = pw.Write([]byte("exit()\n"))
	if err := <-done; err != nil {
		t.Fatalf("python exit: %v", err)
	}
}
