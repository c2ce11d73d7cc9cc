package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestFailoverWorkerPartitioned: one of two fake workers is cut off from
// NATS for longer than the lease (6 s) + the reaper's lost grace (15 s) + a
// sweep (10 s), then restored. The rest of the system keeps its
// connections. Counted: the load's errors meanwhile, and whether the
// partitioned worker serves again afterwards (a create placed on it, and
// an exec and a kill on that sandbox, answered).
//
// The cut: as root with iproute2, the worker runs in a network namespace
// of its own (netns_test.go) that reaches NATS over a veth, and the veth's
// end in the namespace is taken down; otherwise (or with
// SBX_FAILOVER_CUT=proxy) the worker dials NATS through a TCP proxy that
// closes its connections and refuses new ones (proxy_test.go).
func TestFailoverWorkerPartitioned(t *testing.T) {
	full(t)
	nats, cut := partitionedNATS(t)
	sys := &system{nats: nats, audit: t.TempDir() + "/audit.jsonl"}
	url := nats.URL()
	sys.routers = append(sys.routers, startProc(t, "router", nil, "router", "--nats", url))
	startProcIn(t, cut.wrap(), "fake-worker-cut", nil, "fake-worker", "--nats", cut.URL(), "--worker-id", "fo-cut")
	startProc(t, "fake-worker-ok", nil, "fake-worker", "--nats", url, "--worker-id", "fo-ok")
	sys.auditor = startProc(t, "auditor", nil, "auditor", "--nats", url, "--log", sys.audit)
	sys.reaper = startProc(t, "reaper", nil, "reaper", "--nats", url)
	nc, cl := connectClient(t, url)
	waitWorker(t, cl, "fo-cut", 30*time.Second)
	waitWorker(t, cl, "fo-ok", 30*time.Second)
	l := startLoad(cl, 3, "fake", "echo", "hi")
	defer l.end()
	l.progress(t, 20, 30*time.Second, "at start")

	t0, during := cutOff(t, cl, l, cut, 35*time.Second)
	back, err := servesAgain(t, cl, "fo-cut", 60*time.Second)
	l.end()

	f := l.figures("a worker cut off from NATS for 35 s (lease 6 s + lost grace 15 s + a sweep), then back")
	f.notes = []string{"the cut: " + cut.String(), during, back}
	f.recovered = []string{"load (the other worker): " + l.recovery(t0).Round(time.Millisecond).String()}
	f.missing, f.doubled = checkAudit(t, sys.audit, l.confirmed, 30*time.Second)
	f.left = liveSandboxes(t, nc, 30*time.Second)
	f.print(t)
	if err != nil || f.missing != 0 || f.doubled != 0 || f.left != 0 {
		t.Errorf("goal figures missed: %s (%v); %d missing, %d doubled, %d sandboxes left", back, err, f.missing, f.doubled, f.left)
	}
	f.checkCoded(t)
}

// partition cuts one process off from NATS and restores it.
type partition interface {
	URL() string    // NATS as the cut-off process dials it
	wrap() []string // the command the process runs under (nil: none)
	cut(t *testing.T, on bool)
	String() string // which cut, for the figures
}

// partitionedNATS starts one NATS node and the partition: a network
// namespace where one can be made (NATS then listens on the veth's host
// end, which the host's processes reach too), else the TCP proxy.
func partitionedNATS(t *testing.T) (*natsNodes, partition) {
	t.Helper()
	ns, why := newNetns(t)
	host := "127.0.0.1"
	if ns != nil {
		host = ns.hostIP
	}
	nats := startNATSOn(t, host, 1)
	addr := strings.TrimPrefix(nats.urls[0], "nats://")
	// The proxy turns a refused connection into an EOF, which a worker
	// does not retry, and a worker in the namespace waits for the server
	// the same way: go on once the server listens.
	if err := within(context.Background(), 30*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("nats-server never listened: %v", err)
	}
	if ns != nil {
		ns.url = nats.urls[0]
		return nats, ns
	}
	c := newCutter(t, addr)
	c.why = why.Error()
	return nats, c
}

// cutOff places a sandbox on fo-cut, cuts the partition for d, execs on
// that sandbox meanwhile (what a caller of the cut-off worker sees), and
// restores it. It returns when the cut began and the exec's outcome.
func cutOff(t *testing.T, cl *client.Client, l *load, cut partition, d time.Duration) (time.Time, string) {
	t.Helper()
	held := onWorker(t, cl, "fo-cut", 100) // a sandbox on the worker about to be cut off
	if held == "" {
		t.Fatal("no create landed on fo-cut in 100 tries")
	}
	cut.cut(t, true)
	t0 := time.Now()
	ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := cl.Exec(ectx, events.ExecRequest{SandboxID: held, Cmd: []string{"echo", "x"}})
	cancel()
	during := "exec on the cut-off worker's sandbox: " + errorKey(err) + " after " + time.Since(t0).Round(100*time.Millisecond).String()
	l.progress(t, 20, 60*time.Second, "while a worker is cut off")
	time.Sleep(time.Until(t0.Add(d))) // the partition lasts past lease + grace + a sweep
	cut.cut(t, false)
	return t0, during
}

// servesAgain waits up to d for worker to serve a create, an exec and a
// kill.
func servesAgain(t *testing.T, cl *client.Client, worker string, d time.Duration) (string, error) {
	t.Helper()
	t1 := time.Now()
	err := within(context.Background(), d, func(ctx context.Context) error {
		id := onWorker(t, cl, worker, 10)
		if id == "" {
			return errors.New("no create placed on it")
		}
		if _, err := cl.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"echo", "x"}}); err != nil {
			killed(cl, id, 30*time.Second) // or this try's sandbox outlives the scenario
			return fmt.Errorf("exec: %w", err)
		}
		if _, err := cl.Kill(ctx, id); err != nil {
			killed(cl, id, 30*time.Second)
			return fmt.Errorf("kill: %w", err)
		}
		return nil
	})
	if err != nil {
		return "the cut-off worker never served again within " + d.String(), err
	}
	return "the cut-off worker served a create, an exec and a kill " + time.Since(t1).Round(100*time.Millisecond).String() + " after the partition ended", nil
}

// killed kills a sandbox, retrying for up to d (a kill to a worker whose
// node consumer is being recreated times out or is deferred).
func killed(cl *client.Client, id string, d time.Duration) {
	_ = within(context.Background(), d, func(ctx context.Context) error {
		_, err := cl.Kill(ctx, id)
		return err
	})
}

// onWorker creates sandboxes until one lands on worker (at most n tries),
// killing the others; "" when none did.
func onWorker(t *testing.T, cl *client.Client, worker string, n int) string {
	t.Helper()
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sb, err := cl.Create(ctx, events.CreateRequest{Class: "fake", TimeoutS: 120})
		if err != nil {
			cancel()
			continue
		}
		rec, err := cl.Get(ctx, sb.SandboxID)
		if err == nil && rec.Worker == worker {
			cancel()
			return sb.SandboxID
		}
		cancel()
		killed(cl, sb.SandboxID, 30*time.Second)
	}
	return ""
}

// waitWorker waits until the routers list a live lease of worker.
func waitWorker(t *testing.T, cl *client.Client, worker string, d time.Duration) {
	t.Helper()
	err := within(context.Background(), d, func(ctx context.Context) error {
		b, err := cl.Backends(ctx)
		if err != nil {
			return err
		}
		for _, x := range b.Backends {
			for _, w := range x.Workers {
				if w.Worker == worker {
					return nil
				}
			}
		}
		return errors.New("no lease of " + worker)
	})
	if err != nil {
		t.Fatalf("worker %s never became live: %v", worker, err)
	}
}
