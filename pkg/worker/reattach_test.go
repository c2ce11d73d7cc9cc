package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// reattacher is the fake backend as a worker.Reattacher: reattach says what
// a restarted worker's re-attach finds; abandoned lists the processes it
// was asked to kill.
type reattacher struct {
	*fake.Backend
	reattach func(p worker.ReattachProcess) (worker.ExitStatus, error)

	mu        sync.Mutex
	asked     []worker.ReattachProcess
	abandoned []string
}

func (r *reattacher) Reattach(ctx context.Context, sandboxID string, p worker.ReattachProcess) (worker.ExitStatus, error) {
	r.mu.Lock()
	r.asked = append(r.asked, p)
	r.mu.Unlock()
	return r.reattach(p)
}

func (r *reattacher) Abandon(ctx context.Context, sandboxID, processID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abandoned = append(r.abandoned, processID)
	return nil
}

// restartWith crashes env's worker and starts another with its id on b
// (and its signing seed, if given).
func restartWith(t *testing.T, env *sbxtest.Env, b worker.Backend, signingSeed ...[]byte) {
	t.Helper()
	env.CrashWorkers()
	cfg := worker.Config{WorkerID: env.WorkerID, Bus: env.Bus, KillOnShutdown: true, Logger: testLog(t)}
	if len(signingSeed) > 0 {
		cfg.SigningSeed = append([]byte(nil), signingSeed[0]...)
	}
	w2, err := worker.New(cfg, env.Conn("worker-2"), b)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })
}

// TestReattachContinuesTheStream: a restarted worker whose backend
// re-attaches asks for the process from the offsets SBX_OUT holds and
// publishes what follows with the next sequence numbers: the client sees
// the stored output, then the rest, with no gap and no duplicate, and the
// exit status. A buffered exec of the predecessor is answered on its reply
// subject with the re-attached result (the router leaves it to a worker
// that answers restarted execs).
func TestReattachContinuesTheStream(t *testing.T) {
	b := &reattacher{Backend: fake.New(fake.Config{})}
	b.reattach = func(p worker.ReattachProcess) (worker.ExitStatus, error) {
		if p.StdoutFrom == 0 && p.StderrFrom == 0 { // the buffered exec: all of it again
			_, _ = p.Stdout.Write([]byte("buffered whole\n"))
			return worker.ExitStatus{Code: 5}, nil
		}
		_, _ = p.Stdout.Write([]byte("the rest\n"))
		return worker.ExitStatus{Code: 0}, nil
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "100000", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got strings.Builder
	for !strings.Contains(got.String(), "drip 3\n") {
		c, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		got.Write(c.Data)
	}
	buffered := make(chan error, 1)
	var bres *events.ExecResult
	go func() {
		var err error
		bres, err = env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "60000"}})
		buffered <- err
	}()
	env.WaitOpened(t, "fake", sb.SandboxID, events.OpExec, 2) // the stream, the buffered exec
	restartWith(t, env, b)

	gaps := uint64(0)
	for {
		c, err := p.Next()
		if err != nil {
			break
		}
		gaps += c.Missing
		got.Write(c.Data)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("re-attached stream: %+v %v", res, err)
	}
	if gaps > 0 {
		t.Errorf("%d chunks missing", gaps)
	}
	b.mu.Lock()
	asked := append([]worker.ReattachProcess(nil), b.asked...)
	b.mu.Unlock()
	var stream worker.ReattachProcess
	for _, a := range asked {
		if a.ID == p.ProcessID {
			stream = a
		}
	}
	out := got.String()
	if stream.ID == "" || stream.StdoutFrom <= 0 || int64(len(out)) != stream.StdoutFrom+int64(len("the rest\n")) ||
		!strings.HasSuffix(out, "\nthe rest\n") || !strings.HasPrefix(out, "drip 1\n") {
		t.Fatalf("re-attach asked %+v; the client saw %q", stream, out)
	}
	if err := <-buffered; err != nil || string(bres.Stdout) != "buffered whole\n" || bres.ExitCode != 5 {
		t.Fatalf("buffered exec across the restart: %+v %v", bres, err)
	}
}

// TestNotReattachableIsLostAndKilled: when the backend cannot re-attach (the
// process or its output is gone), the stream ends with ProcessLost, a
// buffered exec is answered ProcessLost at once (not at the router's timer),
// and what may be left of both is killed.
func TestNotReattachableIsLostAndKilled(t *testing.T) {
	b := &reattacher{Backend: fake.New(fake.Config{})}
	b.reattach = func(worker.ReattachProcess) (worker.ExitStatus, error) {
		return worker.ExitStatus{}, errors.Join(worker.ErrNotReattachable, errors.New("the agent has no such process"))
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "100000", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	buffered := make(chan error, 1)
	go func() {
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "60000"}})
		buffered <- err
	}()
	env.WaitOpened(t, "fake", sb.SandboxID, events.OpExec, 2)
	start := time.Now()
	restartWith(t, env, b)
	if _, err := p.Wait(); !errors.Is(err, events.ErrProcessLost) {
		t.Fatalf("stream: %v, want ProcessLost", err)
	}
	if err := <-buffered; !errors.Is(err, events.ErrProcessLost) {
		t.Fatalf("buffered exec: %v, want ProcessLost", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the buffered exec was answered %s after the restart", took)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.abandoned) != 2 {
		t.Fatalf("abandoned %v, want both processes killed", b.abandoned)
	}
}

// TestReattachKeepsTheOutputCap: a re-attached exec keeps the output cap its
// request asked for (its opened record names it), not the default: a
// buffered exec's small cap truncates what the re-attach brings, a large one
// keeps more than the default's 256 KiB; a streamed exec's cap counts the
// bytes streamed before the restart.
func TestReattachKeepsTheOutputCap(t *testing.T) {
	big := strings.Repeat("x", int(events.DefaultBufferedOutputCap)+1000)
	b := &reattacher{Backend: fake.New(fake.Config{})}
	b.reattach = func(p worker.ReattachProcess) (worker.ExitStatus, error) {
		if p.StdoutFrom == 0 && p.StderrFrom == 0 {
			_, _ = p.Stdout.Write([]byte(big))
			return worker.ExitStatus{Code: 0}, nil
		}
		_, _ = p.Stdout.Write([]byte(strings.Repeat("y", 100)))
		return worker.ExitStatus{Code: 0}, nil
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	const streamCap = 40
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "100000", "100"}, OutputLimit: streamCap})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got strings.Builder
	for !strings.Contains(got.String(), "drip 2\n") {
		c, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		got.Write(c.Data)
	}
	type reply struct {
		res *events.ExecResult
		err error
	}
	small, large := make(chan reply, 1), make(chan reply, 1)
	for _, x := range []struct {
		limit int64
		to    chan reply
	}{{4, small}, {2 * events.DefaultBufferedOutputCap, large}} {
		go func() {
			res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "60000"}, OutputLimit: x.limit})
			x.to <- reply{res, err}
		}()
	}
	env.WaitOpened(t, "fake", sb.SandboxID, events.OpExec, 3)
	restartWith(t, env, b)

	for {
		c, err := p.Next()
		if err != nil {
			break
		}
		got.Write(c.Data)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatalf("re-attached stream: %v", err)
	}
	if got.Len() != streamCap || !res.Truncated {
		t.Errorf("re-attached stream: %d bytes, truncated %v; want its cap, %d, truncated", got.Len(), res.Truncated, streamCap)
	}
	if r := <-small; r.err != nil || string(r.res.Stdout) != "xxxx" || !r.res.Truncated {
		if r.err != nil {
			t.Errorf("re-attached exec with a 4-byte cap: %v", r.err)
		} else {
			t.Errorf("re-attached exec with a 4-byte cap: %d bytes, truncated %v", len(r.res.Stdout), r.res.Truncated)
		}
	}
	if r := <-large; r.err != nil || len(r.res.Stdout) != len(big) || r.res.Truncated {
		t.Errorf("re-attached exec with a 512 KiB cap: %d bytes, %v", len(r.res.Stdout), r.err)
	}
}
