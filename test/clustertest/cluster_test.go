package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

const routing = `default_class: fake
classes:
  fake: {backend: fake}
`

// failoverBound is how long create, exec and stream may fail after the
// node leading SBX_CMD crashes: every stream, bucket and consumer it led
// elects a new leader after a Raft election timeout (4-9 s). Observed 4-8 s
// under -race; the margin is for a busy machine (make test runs packages in
// parallel).
const failoverBound = 30 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("SBX_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func connect(t *testing.T, c *Cluster, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestClusterFailover runs the router and a fake worker on a three-node
// cluster with R3 streams and buckets, shuts down the node leading SBX_CMD,
// and checks that create and exec work again within failoverBound, then
// that the node rejoins after a restart.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster takes ~15 s; skipped under -short")
	}
	start := time.Now()
	log := testLogger(t)
	cl := StartCluster(t, 3)
	busCfg := bus.Config{Replicas: 3, LeaseTTL: 3 * time.Second}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := connect(t, cl, "admin")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureWithRetry(ctx, js, busCfg); err != nil {
		t.Fatalf("ensure R3 streams: %v", err)
	}
	t.Logf("R3 streams and buckets ready after %s", time.Since(start).Round(time.Millisecond))

	// Services: one router and one fake worker, each connected with all
	// three URLs; they stop before the nodes (cleanups run last-in first-out).
	svcCtx, svcCancel := context.WithCancel(context.Background())
	var done []chan struct{}
	runSvc := func(name string, f func(context.Context) error) {
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			if err := f(svcCtx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	t.Cleanup(func() {
		svcCancel()
		for _, d := range done {
			select {
			case <-d:
			case <-time.After(30 * time.Second):
				t.Errorf("a service did not stop within 30s")
			}
		}
	})
	rt, err := router.ParseRouting([]byte(routing))
	if err != nil {
		t.Fatal(err)
	}
	rsvc, err := router.New(router.Config{Routing: rt, Bus: busCfg, Logger: log.With("service", "router")}, connect(t, cl, "router"))
	if err != nil {
		t.Fatal(err)
	}
	runSvc("router", rsvc.Run)
	w, err := worker.New(worker.Config{WorkerID: "fake-1", Bus: busCfg, KillOnShutdown: true, Logger: log.With("service", "worker")},
		connect(t, cl, "worker"), fake.New(fake.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	runSvc("worker", w.Run)

	c, err := client.New(connect(t, cl, "client"), client.WithTeardownGrace(2*time.Second), client.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a live fake worker", func(ctx context.Context) error {
		b, err := c.Backends(ctx)
		if err != nil {
			return err
		}
		for _, x := range b.Backends {
			if x.Name == "fake" && len(x.Workers) > 0 {
				return nil
			}
		}
		return errors.New("no live fake worker")
	})

	// Healthy cluster: create, exec, stream.
	sb, err := c.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	step := time.Now()
	checkExec(ctx, t, c, sb.SandboxID, "before")
	t.Logf("exec took %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()
	checkStream(ctx, t, c, sb.SandboxID, 256<<10)
	t.Logf("stream took %s", time.Since(step).Round(time.Millisecond))

	// Shut down the node that leads SBX_CMD.
	leader := streamLeader(ctx, t, js, events.StreamCommands)
	li := cl.Index(leader)
	if li < 0 {
		t.Fatalf("SBX_CMD leader %q is not a node of the cluster", leader)
	}
	t.Logf("crashing %s, the leader of %s, at %s", leader, events.StreamCommands, time.Since(start).Round(time.Millisecond))
	lost := time.Now()
	cl.Crash(li)

	// Within failoverBound, a new sandbox can be created and used (exec and
	// a streamed exec), and the sandbox created before the crash still
	// answers. Every stream, bucket and consumer the crashed node led elects
	// a new leader on its own, so the steps may recover one after another.
	var sb2 *events.CreateReply
	waitFor(t, failoverBound, "create, exec and stream after the crash", func(ctx context.Context) error {
		if sb2 == nil {
			r, err := c.Create(ctx, events.CreateRequest{TimeoutS: 300})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			sb2 = &r.CreateReply
		}
		if err := execEcho(ctx, c, sb2.SandboxID, "after"); err != nil {
			return err
		}
		if err := execEcho(ctx, c, sb.SandboxID, "survivor"); err != nil {
			return fmt.Errorf("old sandbox: %w", err)
		}
		return streamWrite(ctx, c, sb2.SandboxID, 64<<10)
	})
	t.Logf("create, exec and stream recovered %s after the crash of %s", time.Since(lost).Round(time.Millisecond), leader)
	if nl := streamLeader(ctx, t, js, events.StreamCommands); nl == leader {
		t.Errorf("SBX_CMD still led by the stopped node %s", nl)
	}

	// Restart the node: it rejoins with its name, store and ports, and every
	// stream is back to three current replicas.
	cl.Restart(li)
	waitFor(t, 20*time.Second, leader+" caught up on every stream", func(ctx context.Context) error {
		for _, name := range []string{events.StreamCommands, events.StreamOps, events.StreamOutput} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			ci := s.CachedInfo().Cluster
			if ci == nil {
				return fmt.Errorf("%s: no cluster info", name)
			}
			current := 0
			if ci.Leader != "" {
				current++
			}
			for _, p := range ci.Replicas {
				if p.Current && !p.Offline {
					current++
				}
			}
			if current != 3 {
				return fmt.Errorf("%s: %d of 3 replicas current (leader %q)", name, current, ci.Leader)
			}
		}
		return nil
	})
	checkExec(ctx, t, c, sb2.SandboxID, "rejoined")
	for _, id := range []string{sb.SandboxID, sb2.SandboxID} {
		if _, err := c.Kill(ctx, id); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
	}
	t.Logf("total %s", time.Since(start).Round(time.Millisecond))
}

func streamLeader(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	var leader string
	waitFor(t, 10*time.Second, name+" leader", func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		if ci := s.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
			leader = ci.Leader
			return nil
		}
		return errors.New("no leader")
	})
	return leader
}

func execEcho(ctx context.Context, c *client.Client, id, word string) error {
	r, err := c.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"echo", word}})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if r.ExitCode != 0 || string(r.Stdout) != word+"\n" {
		return fmt.Errorf("exec: exit %d stdout %q", r.ExitCode, r.Stdout)
	}
	return nil
}

func checkExec(ctx context.Context, t *testing.T, c *client.Client, id, word string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := execEcho(ctx, c, id, word); err != nil {
		t.Fatalf("%s: %v", word, err)
	}
}

// checkStream streams size bytes from the fake and checks that every chunk
// arrives in order with none missing.
func checkStream(ctx context.Context, t *testing.T, c *client.Client, id string, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := streamWrite(ctx, c, id, size); err != nil {
		t.Fatal(err)
	}
}

func streamWrite(ctx context.Context, c *client.Client, id string, size int) error {
	p, err := c.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"write", fmt.Sprint(size), "16384"}})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	defer p.Close()
	n, last := 0, uint64(0)
	for {
		ch, err := p.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("stream: %w", err)
		}
		if ch.Missing != 0 || ch.Seq != last+1 {
			return fmt.Errorf("stream: chunk %d after %d (%d missing)", ch.Seq, last, ch.Missing)
		}
		last = ch.Seq
		n += len(ch.Data)
	}
	res, err := p.Wait()
	if err != nil {
		return fmt.Errorf("stream wait: %w", err)
	}
	if n != size || res.ExitCode != 0 || !res.Streamed {
		return fmt.Errorf("stream: %d bytes (want %d), exit %d, streamed %v", n, size, res.ExitCode, res.Streamed)
	}
	return nil
}

// waitFor retries f, each try bounded by 3 s, until it succeeds or within
// passes; it fails the test with f's last error.
func waitFor(t *testing.T, within time.Duration, what string, f func(context.Context) error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if msg := err.Error(); msg != last {
			t.Logf("%s: after %s: %v", what, time.Since(start).Round(time.Millisecond), err)
			last = msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond) // retry interval, with a deadline
	}
}
