package agent

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/server"
	"github.com/sandboxio/sandboxio/internal/poll"
)

// pairIn serves a real agent server (on this host, as this user), whose
// default directory is dir, over a pipe.
func pairIn(t testing.TB, dir string) *Client {
	t.Helper()
	a, b := net.Pipe()
	s, err := server.New(server.Config{Env: os.Environ(), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, b, b, true) }()
	c, err := Dial(context.Background(), a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); b.Close(); <-done })
	return c
}

// TestExecWorkingDirectories: a process in the agent's own directory (here
// the root, which cannot be replaced: it inherits the agent's instead of
// entering it by path) runs there, as does one given another cwd, and a
// missing cwd is the start error it always was.
func TestExecWorkingDirectories(t *testing.T) {
	t.Chdir("/")
	c := pairIn(t, "/")
	tmp := t.TempDir()
	for _, tc := range []struct {
		name, cwd, want string
		code            int
		startErr        bool
	}{
		{"default, inherited", "", "/\n", 0, false},
		{"the default named", "/", "/\n", 0, false},
		{"another directory", tmp, tmp + "\n", 0, false},
		{"missing", tmp + "/nope", "", 126, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			ex, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"pwd"}, Cwd: tc.cwd, Stdout: &out})
			if err != nil || ex.Code != tc.code || (ex.StartError != "") != tc.startErr || out.String() != tc.want {
				t.Fatalf("exit %+v err %v out %q, want code %d out %q", ex, err, out.String(), tc.code, tc.want)
			}
		})
	}
}

// TestReaperStatuses: many processes that exit at once each get their own
// status (one that exits before it is registered waits for it), and an
// orphan re-parented to the agent is reaped, not left a zombie.
func TestReaperStatuses(t *testing.T) {
	c := realPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "exit " + strconv.Itoa(i)}})
			if err != nil || ex.Code != i {
				errs <- fmt.Errorf("exec %d: exit %+v err %v", i, ex, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var out bytes.Buffer
	ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "sleep 0.2 >/dev/null 2>&1 & echo $!"}, Stdout: &out})
	if err != nil || ex.Code != 0 {
		t.Fatalf("orphan's parent: %+v %v", ex, err)
	}
	pid := strings.TrimSpace(out.String())
	err = poll.Until(ctx, 10*time.Second, func() error {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return nil // gone: reaped
		}
		return fmt.Errorf("orphan %s still there: %s", pid, b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lineWatcher signals once its output holds want.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestBurstArrivesWhileRunning: a burst of output that a process writes
// in many small writes is delivered whole, in order, while the process
// still runs: nothing holds its tail back for more.
func TestBurstArrivesWhileRunning(t *testing.T) {
	c := realPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := &lineWatcher{want: "line1999\n", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; sleep 15"},
			Stdout: w, Mark: "p-burst"})
		done <- err
	}()
	select {
	case <-w.seen:
	case err := <-done:
		t.Fatalf("the exec ended (%v) before its burst arrived", err)
	case <-time.After(10 * time.Second):
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("the burst's end did not arrive while the process ran; got %d bytes", w.buf.Len())
	}
	cancel()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, l := range strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n") {
		if l != "line"+strconv.Itoa(i) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
}
