package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

const leaseTTL = time.Second // the server's minimum marker TTL is 1s

type env struct {
	srv *embednats.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	reg jetstream.KeyValue
	wkv jetstream.KeyValue
}

func startEnv(t *testing.T) *env {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e := &env{srv: srv, nc: connect(t, srv, "test")}
	e.js, _ = jetstream.New(e.nc)
	ctx := context.Background()
	if err := bus.Ensure(ctx, e.js, bus.Config{LeaseTTL: leaseTTL, ReaperLeaderTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if e.reg, err = e.js.KeyValue(ctx, events.BucketRegistry); err != nil {
		t.Fatal(err)
	}
	if e.wkv, err = e.js.KeyValue(ctx, events.BucketWorkers); err != nil {
		t.Fatal(err)
	}
	return e
}

func connect(t *testing.T, srv *embednats.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := srv.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// partition hands out in-process connections whose client-to-server
// traffic can be cut: once cut, writes are silently dropped, so requests
// hang until their deadline as behind a network partition.
type partition struct {
	srv *server.Server
	cut atomic.Bool
}

func (p *partition) InProcessConn() (net.Conn, error) {
	c, err := p.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	return &partitionConn{Conn: c, cut: &p.cut}, nil
}

type partitionConn struct {
	net.Conn
	cut *atomic.Bool
}

func (c *partitionConn) Write(b []byte) (int, error) {
	if c.cut.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, d, poll.Bool(what, cond))
}

// hookLog records the Service.hook calls of one instance.
type hookLog struct {
	mu   sync.Mutex
	seen map[string]int // point + " " + key -> count
}

func (h *hookLog) hook(point, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]int{}
	}
	h.seen[point+" "+key]++
}

func (h *hookLog) count(point, key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[point+" "+key]
}

// runReaper starts Run (with hook, if given, installed first) and returns a
// stop function (also run at cleanup).
func runReaper(t *testing.T, nc *nats.Conn, cfg Config, hook ...func(point, key string)) (*Service, func()) {
	t.Helper()
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = time.Second
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour // tests rely on the watches, not the sweep
	}
	s, err := New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	if len(hook) > 0 {
		s.hook = hook[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

func putSandbox(t *testing.T, e *env, id, worker string, deadline time.Time, created time.Time) {
	t.Helper()
	putRecord(t, e, events.Sandbox{SandboxID: id, Backend: "fake", Worker: worker, State: events.StateRunning,
		CreatedAt: created, Deadline: deadline})
}

func putRecord(t *testing.T, e *env, sb events.Sandbox) {
	t.Helper()
	id := sb.SandboxID
	b, _ := json.Marshal(sb)
	if _, err := e.reg.Put(context.Background(), id, b); err != nil {
		t.Fatal(err)
	}
}

func getSandbox(t *testing.T, e *env, id string) (events.Sandbox, uint64) {
	t.Helper()
	en, err := e.reg.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var sb events.Sandbox
	if err := json.Unmarshal(en.Value(), &sb); err != nil {
		t.Fatal(err)
	}
	return sb, en.Revision()
}

// fakeWorker holds a lease and answers kill commands on its node consumer,
// as the worker runtime does: registry to gone, then a KillReply.
type fakeWorker struct {
	name      string
	stopLease func()
	mu        sync.Mutex
	killedAt  map[string]time.Time
	killedBy  map[string]string // sandbox -> the verified signer of its kill ("" unsigned or invalid)
}

func startWorker(t *testing.T, e *env, name string, consume bool) *fakeWorker {
	t.Helper()
	w := &fakeWorker{name: name, killedAt: map[string]time.Time{}, killedBy: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	refreshed := make(chan struct{})
	// stopLease returns once no refresh can follow: a Delete after it stays.
	w.stopLease = func() { cancel(); <-refreshed }
	t.Cleanup(cancel)
	lease, _ := json.Marshal(events.WorkerLease{Backend: "fake", Worker: name})
	if _, err := e.wkv.Put(ctx, events.WorkerKey("fake", name), lease); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(refreshed)
		tk := time.NewTicker(leaseTTL / 4)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				_, _ = e.wkv.Put(ctx, events.WorkerKey("fake", name), lease)
			}
		}
	}()
	cons, err := e.js.CreateOrUpdateConsumer(ctx, events.StreamCommands, jetstream.ConsumerConfig{
		Durable: events.NodeConsumer("fake", name), FilterSubject: events.NodeFilter("fake", name),
		AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if !consume {
		return w
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := cemsg.Decode(m.Headers(), m.Data())
		if err != nil || env.Type != events.TypeCmdKill {
			_ = m.Term()
			return
		}
		var kr events.KillRequest
		_ = json.Unmarshal(env.Data, &kr)
		w.mu.Lock()
		w.killedAt[kr.SandboxID] = time.Now()
		if signer, err := recsign.Verify(m.Subject(), m.Headers(), m.Data()); err == nil {
			w.killedBy[kr.SandboxID] = signer
		}
		w.mu.Unlock()
		reply := events.KillReply{SandboxID: kr.SandboxID, State: events.StateGone}
		for {
			en, err := e.reg.Get(ctx, kr.SandboxID)
			if err != nil {
				break
			}
			var sb events.Sandbox
			_ = json.Unmarshal(en.Value(), &sb)
			if sb.State.Ended() {
				reply.AlreadyGone = true
				break
			}
			now := time.Now().UTC()
			sb.State, sb.EndedAt, sb.EndReason = events.StateGone, &now, "killed"
			b, _ := json.Marshal(sb)
			if _, err := e.reg.Update(ctx, kr.SandboxID, b, en.Revision()); err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
				break
			}
		}
		if env.ReplyTo != "" {
			b, _ := json.Marshal(reply)
			_ = e.nc.Publish(env.ReplyTo, b)
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return w
}

func (w *fakeWorker) killed(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.killedAt[id]
	return at, ok
}

// records returns the closed records of a kind on SBX_OPS.
func records(t *testing.T, e *env, kind string) []events.OpRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.OpRecord
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		env, err := cemsg.Decode(m.Header, m.Data)
		if err != nil {
			t.Fatalf("record %d: %v", seq, err)
		}
		var r events.OpRecord
		if err := json.Unmarshal(env.Data, &r); err != nil {
			t.Fatal(err)
		}
		if env.ID != r.OpID+"-"+r.Phase {
			t.Errorf("ce-id %s for op %s phase %s", env.ID, r.OpID, r.Phase)
		}
		if r.Kind == kind && r.Phase == events.EventClosed {
			out = append(out, r)
		}
	}
	return out
}

// queueCommand publishes a command for a worker's node consumer.
func queueCommand(t *testing.T, e *env, worker string) {
	t.Helper()
	m, err := cemsg.Encode(events.NodeSubject("fake", worker, "exec"), cemsg.Envelope{ID: events.NewID(),
		Type: events.TypeCmdExec, Source: "test", Data: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// queuedCommands counts the commands stored for a worker.
func queuedCommands(t *testing.T, e *env, worker string) uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), events.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(events.NodeFilter("fake", worker)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func consumerExists(t *testing.T, e *env, worker string) bool {
	t.Helper()
	_, err := e.js.Consumer(context.Background(), events.StreamCommands, events.NodeConsumer("fake", worker))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
