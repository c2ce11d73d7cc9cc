package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/auditor"
)

// confirmed is an operation whose client saw it succeed.
type confirmed struct{ kind, sandbox, process string }

// load runs create → exec → kill cycles on n goroutines until stopped and
// remembers every operation that succeeded.
type load struct {
	mu    sync.Mutex
	ok    []confirmed
	fails atomic.Int64
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func startLoad(env *sbxtest.Env, n int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{stop: cancel}
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				if !l.cycle(ctx, env) {
					select { // back off while the bus is down
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		}()
	}
	return l
}

func (l *load) cycle(ctx context.Context, env *sbxtest.Env) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sb, err := env.Client.Create(cctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		l.fails.Add(1)
		return false
	}
	l.add(confirmed{events.OpCreate, sb.SandboxID, ""})
	pid := events.NewID()
	if r, err := env.Client.Exec(cctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: pid, Cmd: []string{"echo", "hi"}}); err == nil && r.ExitCode == 0 {
		l.add(confirmed{events.OpExec, sb.SandboxID, pid})
	} else {
		l.fails.Add(1)
	}
	// The kill must happen even when ctx is done, or the sandbox lives on.
	kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer kcancel()
	for {
		if _, err := env.Client.Kill(kctx, sb.SandboxID); err == nil {
			l.add(confirmed{events.OpKill, sb.SandboxID, ""})
			return true
		}
		l.fails.Add(1)
		if kctx.Err() != nil {
			return false
		}
		select {
		case <-kctx.Done():
		case <-time.After(50 * time.Millisecond): // retry while the bus is down
		}
	}
}

func (l *load) add(c confirmed) {
	l.mu.Lock()
	l.ok = append(l.ok, c)
	l.mu.Unlock()
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ok)
}

// progress waits until n more operations have succeeded.
func (l *load) progress(t *testing.T, n int, what string) {
	t.Helper()
	target := l.count() + n
	sbxtest.Eventually(t, 60*time.Second, func() bool { return l.count() >= target },
		"load made no progress %s (%d ok, %d failures)", what, l.count(), l.fails.Load())
}

// TestNothingLost: under a steady load, the auditor is stopped and
// restarted, then the NATS server is restarted; afterwards every operation
// record is in the audit log exactly once, every operation clients saw
// succeed is there opened and closed, and the log verifies. Changing one
// line makes Verify fail naming it.
func TestNothingLost(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLogger()})
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	acfg := auditor.Config{LogPath: path, Batch: 16, AckWait: 2 * time.Second, Logger: testLogger()}
	_, aud := startAuditor(t, env.Conn("auditor-1"), acfg)

	l := startLoad(env, 4)
	defer func() { l.stop(); l.wg.Wait() }()
	l.progress(t, 30, "at start")

	aud.stop(t) // the auditor goes away mid-load...
	l.progress(t, 30, "without an auditor")
	_, aud = startAuditor(t, env.Conn("auditor-2"), acfg) // ...and comes back on the same file
	l.progress(t, 30, "after the auditor restart")

	t0 := time.Now()
	env.RestartServer()
	l.progress(t, 30, "after the NATS restart")
	t.Logf("load resumed %s after the NATS restart", time.Since(t0).Round(time.Millisecond))
	l.stop()
	l.wg.Wait()

	t0 = time.Now()
	t.Logf("%d records not yet acknowledged when the load stopped", env.RecordsUnsettled())
	entries := waitAudited(t, env, js, path, 60*time.Second)
	aud.stop(t)
	t.Logf("audit log complete %s after the load stopped", time.Since(t0).Round(time.Millisecond))

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := auditor.Verify(f)
	f.Close()
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}

	// Exactly once: every record id once, every operation opened and closed once.
	ids := map[string]int{}
	type phases struct{ opened, closed int }
	ops := map[string]*phases{}
	byKey := map[confirmed]*phases{}
	for i, r := range records(t, entries) {
		ids[entries[i].ID]++
		p := ops[r.OpID]
		if p == nil {
			p = &phases{}
			ops[r.OpID] = p
		}
		switch r.Phase {
		case events.EventOpened:
			p.opened++
		case events.EventClosed:
			p.closed++
		}
		byKey[confirmed{r.Kind, r.SandboxID, r.ProcessID}] = p
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("record %s appears %d times", id, n)
		}
	}
	for id, p := range ops {
		if p.opened != 1 || p.closed != 1 {
			t.Errorf("operation %s: opened %d times, closed %d times", id, p.opened, p.closed)
		}
	}
	l.mu.Lock()
	ok := append([]confirmed(nil), l.ok...)
	l.mu.Unlock()
	for _, c := range ok {
		if p := byKey[c]; p == nil || p.opened != 1 || p.closed != 1 {
			t.Errorf("operation %+v succeeded for its client but is not in the audit log opened and closed once", c)
		}
	}
	t.Logf("%d operations confirmed, %d failed attempts, %d audit lines, %d operations", len(ok), l.fails.Load(), len(entries), len(ops))

	// Tampering: change one line in the middle.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(b, []byte("\n"))
	k := len(lines) / 2
	changed := bytes.Replace(lines[k], []byte(`"phase":"`), []byte(`"phase":"x`), 1)
	if bytes.Equal(changed, lines[k]) {
		t.Fatalf("line %d has no phase to change: %s", k+1, lines[k])
	}
	lines[k] = changed
	rep, err = auditor.Verify(bytes.NewReader(bytes.Join(lines, []byte("\n"))))
	if !errors.Is(err, events.ErrAuditTampered) || rep.FirstBadLine() != k+1 {
		t.Fatalf("tampered line %d: got %v, first bad line %d", k+1, err, rep.FirstBadLine())
	}
}
