package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/auditor"
)

// confirmed is an operation a client saw succeed: it must have its records.
type confirmed struct{ kind, sandbox, process string }

// span is one successful create→exec→kill cycle.
type span struct{ start, end time.Time }

// load runs create → exec → kill cycles on n goroutines and counts what
// the callers saw.
type load struct {
	cl    *client.Client
	class string
	cmd   []string

	mu        sync.Mutex
	requests  int
	errs      map[string]int // SBX code, or "no code: …"
	confirmed []confirmed
	cycles    []span
	created   map[string]bool // every sandbox id a create returned

	stop context.CancelFunc
	wg   sync.WaitGroup
}

func connectClient(t *testing.T, url string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("failover-load"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The teardown grace (a create cancelled when the load stops) is long
	// enough for a kill whose records wait for an SBX_OPS election.
	cl, err := client.New(nc, client.WithTeardownGrace(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return nc, cl
}

func startLoad(cl *client.Client, n int, class string, cmd ...string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cl: cl, class: class, cmd: cmd, errs: map[string]int{}, created: map[string]bool{}, stop: cancel}
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				if !l.cycle(ctx) {
					select { // back off while the system is down
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	return l
}

// end stops the load and waits for the cycles in flight (their kills run
// to the end).
func (l *load) end() {
	l.stop()
	l.wg.Wait()
}

func (l *load) cycle(ctx context.Context) bool {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sb, err := l.cl.Create(cctx, events.CreateRequest{Class: l.class, TimeoutS: 120})
	cancel()
	if !l.count(events.OpCreate, err) {
		return false
	}
	l.add(confirmed{events.OpCreate, sb.SandboxID, ""}, sb.SandboxID)
	pid := events.NewID()
	// A deadline shorter than the router's bound (15 s + 10 s): a reply lost
	// behind the router is answered at the caller's deadline
	// (Sbx-Caller-Timeout-Ms).
	ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
	r, err := l.cl.Exec(ectx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: pid, Cmd: l.cmd, TimeoutMS: 15000})
	cancel()
	ok := l.count(events.OpExec, err) && r.ExitCode == 0
	if ok {
		l.add(confirmed{events.OpExec, sb.SandboxID, pid}, "")
	}
	// The kill runs even when the load stops, or the sandbox lives on; a
	// retryable failure is retried, as a careful client would.
	kctx, kcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer kcancel()
	for {
		actx, acancel := context.WithTimeout(kctx, 10*time.Second)
		kr, err := l.cl.Kill(actx, sb.SandboxID)
		acancel()
		if l.count(events.OpKill, err) {
			// A kill answered "already gone" (the reaper marked the
			// sandbox lost, SBX_E1624 retried) did nothing: the reaper's
			// lost record is the sandbox's end, not a kill record.
			if !kr.AlreadyGone {
				l.add(confirmed{events.OpKill, sb.SandboxID, ""}, "")
			}
			break
		}
		var e *events.Error
		if kctx.Err() != nil || errors.As(err, &e) && !e.Retryable {
			return false
		}
		// Retryable, or no answer at all (a router killed with the
		// request): kill is idempotent, send it again.
		time.Sleep(100 * time.Millisecond) // a retryable kill, backing off
	}
	if ok {
		l.mu.Lock()
		l.cycles = append(l.cycles, span{start, time.Now()})
		l.mu.Unlock()
	}
	return ok
}

// count counts one request and its error; it reports success.
func (l *load) count(op string, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.requests++
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false // the harness stopped the load: not a request that failed
	}
	l.requests++
	l.errs[op+" "+errorKey(err)]++
	return false
}

// errorKey names an error by its SBX code (and whether it is retryable),
// or says it had none.
func errorKey(err error) string {
	var e *events.Error
	switch {
	case errors.As(err, &e):
		r := "final"
		if e.Retryable {
			r = "retryable"
		}
		return string(e.Code) + " " + e.Name + " (" + r + ")"
	case errors.Is(err, context.DeadlineExceeded):
		return "no code: client timeout"
	default:
		return "no code: " + err.Error()
	}
}

func (l *load) add(c confirmed, created string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.confirmed = append(l.confirmed, c)
	if created != "" {
		l.created[created] = true
	}
}

// okCycles is the number of successful cycles.
func (l *load) okCycles() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cycles)
}

// progress waits until n more cycles have succeeded (bounded).
func (l *load) progress(t *testing.T, n int, d time.Duration, what string) {
	t.Helper()
	target := l.okCycles() + n
	deadline := time.Now().Add(d)
	for l.okCycles() < target {
		if time.Now().After(deadline) {
			t.Fatalf("no progress %s: %d cycles in %s (errors %v)", what, l.okCycles()-target+n, d, l.errSnapshot())
		}
		time.Sleep(50 * time.Millisecond) // watching another goroutine's count
	}
}

func (l *load) errSnapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.errs))
	for k, v := range l.errs {
		m[k] = v
	}
	return m
}

// recovery is the time from fault until the first successful cycle that
// started after it ended.
func (l *load) recovery(fault time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	best := time.Duration(-1)
	for _, c := range l.cycles {
		if c.start.Before(fault) {
			continue
		}
		if d := c.end.Sub(fault); best < 0 || d < best {
			best = d
		}
	}
	return best
}

// figures is what a scenario prints.
type figures struct {
	scenario  string
	requests  int
	errs      map[string]int
	confirmed int
	missing   int // acknowledged operations without opened+closed records
	doubled   int // records or operations seen more than once
	left      int // sandboxes still live in the registry after recovery
	leftDock  int // containers of the run still present (-1: not counted)
	recovered []string
	notes     []string
}

func (f figures) print(t *testing.T) {
	keys := make([]string, 0, len(f.errs))
	for k := range f.errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "FAILOVER %s\n", f.scenario)
	fmt.Fprintf(&b, "  requests            %d\n", f.requests)
	fmt.Fprintf(&b, "  acknowledged ops    %d\n", f.confirmed)
	if len(keys) == 0 {
		fmt.Fprintf(&b, "  errors              none\n")
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "  error               %5d  %s\n", f.errs[k], k)
	}
	if f.missing >= 0 {
		fmt.Fprintf(&b, "  records missing     %d\n", f.missing)
		fmt.Fprintf(&b, "  records doubled     %d\n", f.doubled)
	}
	fmt.Fprintf(&b, "  sandboxes left      %d\n", f.left)
	if f.leftDock >= 0 {
		fmt.Fprintf(&b, "  containers left     %d\n", f.leftDock)
	}
	for _, r := range f.recovered {
		fmt.Fprintf(&b, "  time to recover     %s\n", r)
	}
	for _, n := range f.notes {
		fmt.Fprintf(&b, "  note                %s\n", n)
	}
	fmt.Print(b.String())
	t.Log("\n" + b.String())
}

// checkCoded fails the test for every failed request answered without an
// SBX code (a bare client timeout included).
func (f figures) checkCoded(t *testing.T) {
	t.Helper()
	for k, n := range f.errs {
		if strings.Contains(k, "no code") {
			t.Errorf("%d failed requests with no code: %s", n, k)
		}
	}
}

// collect fills the load's figures.
func (l *load) figures(scenario string) figures {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make(map[string]int, len(l.errs))
	for k, v := range l.errs {
		errs[k] = v
	}
	return figures{scenario: scenario, requests: l.requests, errs: errs, confirmed: len(l.confirmed), leftDock: -1}
}

// checkAudit compares the acknowledged operations with the audit log at
// path, waiting (bounded) for the auditor to catch up: it returns the
// operations acknowledged without their records and the records or
// operations doubled.
func checkAudit(t *testing.T, path string, ok []confirmed, d time.Duration) (missing, doubled int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		last := time.Now().After(deadline)
		missing, doubled = auditDiff(t, path, ok, last)
		if missing == 0 || last {
			return missing, doubled
		}
		time.Sleep(250 * time.Millisecond) // the auditor is a separate process
	}
}

func auditDiff(t *testing.T, path string, ok []confirmed, last bool) (missing, doubled int) {
	f, err := os.Open(path)
	if err != nil {
		return len(ok), 0
	}
	defer f.Close()
	type phases struct{ opened, closed int }
	ids := map[string]int{}
	ops := map[string]*phases{}
	byKey := map[confirmed]*phases{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditor.Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		var r events.OpRecord
		if json.Unmarshal(e.Record, &r) != nil {
			continue
		}
		ids[e.ID]++
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
	for _, n := range ids {
		if n > 1 {
			doubled++
		}
	}
	for _, p := range ops {
		if p.opened > 1 || p.closed > 1 {
			doubled++
		}
	}
	for _, c := range ok {
		if p := byKey[c]; p == nil || p.opened < 1 || p.closed < 1 {
			missing++
			if last {
				t.Logf("acknowledged without its records: %s %s %s (phases %+v)", c.kind, c.sandbox, c.process, p)
			}
		}
	}
	return missing, doubled
}

// liveSandboxes counts the registry's records that are not ended, waiting
// up to d for them to go (a kill or the reaper finishing).
func liveSandboxes(t *testing.T, nc *nats.Conn, d time.Duration) int {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(d)
	for {
		n := countLive(js)
		if n == 0 || time.Now().After(deadline) {
			if n > 0 {
				for _, sb := range listLive(js) {
					t.Logf("left live: %s state=%s worker=%s created=%s", sb.SandboxID, sb.State, sb.Worker, sb.CreatedAt.Format(time.RFC3339Nano))
				}
			}
			return n
		}
		time.Sleep(500 * time.Millisecond) // the reaper and the workers are separate processes
	}
}

// listLive is the registry's records that are not ended.
func listLive(js jetstream.JetStream) []events.Sandbox {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	var out []events.Sandbox
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var sb events.Sandbox
		if json.Unmarshal(e.Value(), &sb) == nil && !sb.State.Ended() {
			out = append(out, sb)
		}
	}
	return out
}

func countLive(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		return -1
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var sb events.Sandbox
		if json.Unmarshal(e.Value(), &sb) == nil && !sb.State.Ended() {
			n++
		}
	}
	return n
}

// dockerAvailable reports whether the docker CLI reaches a daemon.
func dockerAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info", "--format", "{{.ID}}").Run() == nil
}

// dockerLeft counts the containers labelled with one of workers (every
// state: created, running, exited), waiting up to d for them to go.
func dockerLeft(workers []string, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := 0
		for _, w := range workers {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label=io.sandboxio.worker="+w).Output()
			cancel()
			if err != nil {
				return -1
			}
			n += len(strings.Fields(string(out)))
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Second) // the reaper and the workers are separate processes
	}
}

// removeContainers removes, at the end of a test, what the run left (only
// containers labelled with its own workers).
func removeContainers(workers []string) {
	for _, w := range workers {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _ := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label=io.sandboxio.worker="+w).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
		cancel()
	}
}
