package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/server"
	"github.com/sandboxio/sandboxio/internal/poll"
)

// agentStream is an agent's byte stream shared by successive workers, like a
// container's attach stream: the agent reads one input that every worker
// writes to, and what it writes goes to whichever worker is attached now
// (nowhere while none is).
type agentStream struct {
	inR *io.PipeReader
	inW *io.PipeWriter

	mu  sync.Mutex
	cur *io.PipeWriter
}

func (a *agentStream) Write(p []byte) (int, error) { // the agent's output
	a.mu.Lock()
	w := a.cur
	a.mu.Unlock()
	if w != nil {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// workerConn is one worker's attachment.
type workerConn struct {
	a *agentStream
	r *io.PipeReader
	w *io.PipeWriter
}

func (c *workerConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *workerConn) Write(p []byte) (int, error)      { return c.a.inW.Write(p) }
func (c *workerConn) SetWriteDeadline(time.Time) error { return nil }
func (c *workerConn) Close() error {
	c.a.mu.Lock()
	if c.a.cur == c.w {
		c.a.cur = nil
	}
	c.a.mu.Unlock()
	_ = c.w.Close()
	return c.r.Close()
}

// startAgent serves a real agent on a shared stream; attach gives a new
// worker's client (the earlier one is cut off, as by a worker that died).
func startAgent(t *testing.T, retain int) (attach func() *Client) {
	t.Helper()
	inR, inW := io.Pipe()
	a := &agentStream{inR: inR, inW: inW}
	s, err := server.New(server.Config{Env: os.Environ(), Dir: t.TempDir(), Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, inR, a, true) }()
	var clients []*Client
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
		cancel()
		inW.Close()
		<-done
	})
	return func() *Client {
		r, w := io.Pipe()
		a.mu.Lock()
		if a.cur != nil {
			a.cur.Close() // the earlier worker is gone
		}
		a.cur = w
		a.mu.Unlock()
		c, err := Dial(context.Background(), &workerConn{a: a, r: r, w: w}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
}

// lockedBuffer is a bytes.Buffer safe for a test to read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReattachReplaysWithoutLossOrDuplication: a worker that dies while an
// exec runs, and a new one that attaches with the offsets it had stored
// (here fewer bytes than the first one received: it died before storing
// them), get the whole output exactly once and the exit status, whether
// the process is still running at the attach or ended meanwhile.
func TestReattachReplaysWithoutLossOrDuplication(t *testing.T) {
	const lines = 30
	var want strings.Builder
	var wantErr strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
		if i%10 == 0 {
			fmt.Fprintf(&wantErr, "err %d\n", i)
		}
	}
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; [ $((i %% 10)) -eq 0 ] && echo "err $i" >&2; i=$((i+1)); sleep 0.02; done; touch "$DONE_FILE"; exit 7`, lines)
	tests := []struct {
		name string
		// finished: the process ends before the new worker attaches.
		finished bool
		// keep is how many of the received stdout bytes the first worker
		// had stored.
		keep func(received int) int
	}{
		{"running, all stored", false, func(n int) int { return n }},
		{"running, part stored", false, func(n int) int { return n / 2 }},
		{"running, none stored", false, func(int) int { return 0 }},
		{"finished meanwhile, part stored", true, func(n int) int { return n / 3 }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			attach := startAgent(t, 0)
			mark := fmt.Sprintf("p-reattach-%d", i)
			doneFile := t.TempDir() + "/done"
			c1 := attach()
			var out1, err1 lockedBuffer
			first := make(chan error, 1)
			go func() {
				_, err := c1.Exec(context.Background(), ExecRequest{Argv: []string{"sh", "-c", script}, Env: []string{"DONE_FILE=" + doneFile}, Mark: mark, Stdout: &out1, Stderr: &err1})
				first <- err
			}()
			poll.Eventually(t, 10*time.Second, func() error {
				if !strings.Contains(out1.String(), "line 12\n") {
					return errors.New("waiting for output")
				}
				return nil
			})
			c2 := attach() // the first worker died; a new one attached
			if err := <-first; !errors.Is(err, ErrUnavailable) {
				t.Fatalf("the first worker's exec: %v, want ErrUnavailable", err)
			}
			got1 := out1.String()
			stored := got1[:tc.keep(len(got1))]
			storedErr := err1.String()
			if tc.finished {
				// The process ends while no worker is attached.
				poll.Eventually(t, 10*time.Second, func() error {
					_, err := os.Stat(doneFile)
					return err
				})
			}
			var out2, err2 bytes.Buffer
			ex, err := c2.Attach(context.Background(), AttachRequest{Mark: mark, StdoutFrom: int64(len(stored)), StderrFrom: int64(len(storedErr)),
				Stdout: &out2, Stderr: &err2})
			if err != nil {
				t.Fatalf("attach: %v", err)
			}
			if ex.Code != 7 {
				t.Fatalf("exit %+v, want code 7", ex)
			}
			if got := stored + out2.String(); got != want.String() {
				t.Fatalf("stdout after re-attach:\n%q\nwant\n%q", got, want.String())
			}
			if got := storedErr + err2.String(); got != wantErr.String() {
				t.Fatalf("stderr after re-attach: %q, want %q", got, wantErr.String())
			}
		})
	}
}

// TestReattachRefusesWhatIsGone: a mark the agent never ran, and offsets
// older than what it keeps, are ErrLost (the worker then reports
// ProcessLost); an exec without a mark dies with its connection.
func TestReattachRefusesWhatIsGone(t *testing.T) {
	attach := startAgent(t, 1024)
	c1 := attach()
	ctx := context.Background()
	var out lockedBuffer
	first := make(chan error, 1)
	go func() {
		_, err := c1.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "head -c 100000 /dev/zero; sleep 30"}, Mark: "p-big", Stdout: &out})
		first <- err
	}()
	unmarked := make(chan error, 1)
	go func() {
		_, err := c1.Exec(ctx, ExecRequest{Argv: []string{"sleep", "30"}})
		unmarked <- err
	}()
	poll.Eventually(t, 10*time.Second, func() error {
		if len(out.String()) < 100000 {
			return errors.New("waiting for output")
		}
		return nil
	})
	c2 := attach()
	<-first
	<-unmarked
	if _, err := c2.Attach(ctx, AttachRequest{Mark: "p-never"}); !errors.Is(err, ErrLost) {
		t.Fatalf("attach to a mark never run: %v, want ErrLost", err)
	}
	if _, err := c2.Attach(ctx, AttachRequest{Mark: "p-big", StdoutFrom: 10}); !errors.Is(err, ErrLost) {
		t.Fatalf("attach from an offset no longer kept: %v, want ErrLost", err)
	}
	// From what it still keeps, the process is there; cancelling the
	// attach kills it.
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	ex, err := c2.Attach(actx, AttachRequest{Mark: "p-big", StdoutFrom: 100000})
	if !errors.Is(err, context.DeadlineExceeded) || ex.Signal != 9 {
		t.Fatalf("cancelled attach: %+v %v, want a KILL", ex, err)
	}
}
