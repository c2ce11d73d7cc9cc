package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestFailoverWorkerKilled: a Docker worker (real containers) under load is
// killed with SIGKILL mid-create and mid-exec (a streamed `sleep` runs on a
// sandbox of its own), restarted with the same --worker-id, killed again
// and replaced by a worker with a new id. Counted: what the callers saw,
// the streamed exec's outcome, the records, and the containers left of
// both worker ids once the reaper and the deadlines have run.
func TestFailoverWorkerKilled(t *testing.T) {
	full(t)
	if !dockerAvailable() {
		t.Skip("no Docker daemon")
	}
	run := events.NewID()[:8]
	w1, w2 := "fo-"+run+"-a", "fo-"+run+"-b"
	t.Cleanup(func() { removeContainers([]string{w1, w2}) })
	sys := startSplit(t, splitOptions{nodes: 1, routers: 1, workers: [][2]string{{"docker-worker", w1}}})
	nc, cl := connectClient(t, sys.nats.URL())
	waitBackend(t, cl, "docker", 60*time.Second)
	l := startLoad(cl, 3, "base", "echo", "hi")
	defer l.end()
	l.progress(t, 5, 90*time.Second, "at start")

	worker := sys.workers[0]
	var recovered, notes []string
	for i, next := range []string{w1, w2} {
		streamed := startStreamed(t, cl)
		t0 := time.Now()
		worker.kill() // mid-create (the load) and mid-exec (the streamed sleep)
		how := "same id"
		if next != w1 || i > 0 {
			how = "new id"
		}
		worker = startProc(t, "docker-worker-"+next+"-"+how[:3], nil, "docker-worker", "--nats", sys.nats.URL(), "--worker-id", next)
		l.progress(t, 5, 120*time.Second, "after the restart with the "+how)
		recovered = append(recovered, "worker killed, back with the "+how+": "+l.recovery(t0).Round(time.Millisecond).String())
		notes = append(notes, "streamed exec on the killed worker ("+how+"): "+streamed.wait(90*time.Second))
	}
	l.end()

	f := l.figures("Docker worker killed mid-create and mid-exec, restarted with the same id, then a new one")
	f.recovered, f.notes = recovered, notes
	f.missing, f.doubled = checkAudit(t, sys.audit, l.confirmed, 60*time.Second)
	f.left = liveSandboxes(t, nc, 90*time.Second)
	f.leftDock = dockerLeft([]string{w1, w2}, 60*time.Second)
	f.print(t)
	if f.missing != 0 || f.doubled != 0 || f.left != 0 || f.leftDock != 0 {
		t.Errorf("goal figures missed: %d missing, %d doubled, %d sandboxes left, %d containers left", f.missing, f.doubled, f.left, f.leftDock)
	}
	f.checkCoded(t)
}

// streamed is a streamed `sleep` whose worker is about to die.
type streamed struct {
	mu   sync.Mutex
	res  string
	done chan struct{}
}

// startStreamed creates a sandbox (its own, 60 s lifetime) and streams a
// process that prints and sleeps; it returns once the process has printed.
func startStreamed(t *testing.T, cl *client.Client) *streamed {
	t.Helper()
	s := &streamed{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	sb, err := cl.Create(ctx, events.CreateRequest{Class: "base", TimeoutS: 60})
	if err != nil {
		cancel()
		t.Fatalf("create for the streamed exec: %v", err)
	}
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", "echo started; sleep 120"}})
	if err != nil {
		cancel()
		t.Fatalf("stream: %v", err)
	}
	if c, err := p.Next(); err != nil || !strings.Contains(string(c.Data), "started") {
		cancel()
		t.Fatalf("stream: %q %v", c.Data, err)
	}
	start := time.Now()
	go func() {
		defer close(s.done)
		defer cancel()
		for {
			_, err := p.Next()
			if err == nil {
				continue
			}
			what := errorKey(err)
			if errors.Is(err, io.EOF) { // an exit marker: what does it say?
				res, werr := p.Wait()
				switch {
				case werr != nil:
					what = "exit marker with " + errorKey(werr)
				case res.Err != nil:
					what = "exit marker with " + errorKey(res.Err)
				default:
					what = fmt.Sprintf("exit marker, exit code %d", res.ExitCode)
				}
			}
			s.mu.Lock()
			s.res = what + " after " + time.Since(start).Round(100*time.Millisecond).String()
			s.mu.Unlock()
			return
		}
	}()
	return s
}

func (s *streamed) wait(d time.Duration) string {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.res
	case <-time.After(d):
		return "no answer within " + d.String() + " (a hang)"
	}
}
