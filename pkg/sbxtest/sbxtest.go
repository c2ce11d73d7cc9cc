package sbxtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/bus"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// Options tune the environment; the zero value is fine.
type Options struct {
	// Backend replaces the fake backend (its Info().Name is the backend).
	Backend worker.Backend
	// Routing replaces the routing file. The default maps every class to
	// the fake backend, default class "fake".
	Routing string
	// Worker and Router adjust the services' configs before they start.
	Worker func(*worker.Config)
	Router func(*router.Config)
	// Listen makes the server listen on a random TCP port (Env.URL) for
	// other processes; otherwise only in-process connections work.
	Listen bool
	Logger *slog.Logger
	// Routers and Workers start that many instances (default 1 each); extra
	// workers run the same backend value.
	Routers, Workers int
	// Memory keeps every stream in memory (benchmarks).
	Memory bool
}

// Env is a running sandboxio.
type Env struct {
	Server   *embednats.Server
	URL      string
	Client   *client.Client
	Fake     *fake.Backend // nil when Options.Backend was given
	WorkerID string
	Bus      bus.Config

	t           testing.TB
	cancel      context.CancelFunc
	workerConns []*nats.Conn
	conns       []*nats.Conn
	done        []chan struct{}

	srvCfg  embednats.Config
	current *currentServer
	routers []stoppable
}

// stoppable is a service with its own cancel and the channel closed when it
// has returned.
type stoppable struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// currentServer hands in-process connections to whichever server is running,
// so that connections reconnect to a restarted server (RestartServer).
type currentServer struct {
	mu sync.Mutex
	s  *server.Server
}

func (c *currentServer) InProcessConn() (net.Conn, error) {
	c.mu.Lock()
	s := c.s
	c.mu.Unlock()
	return s.InProcessConn()
}

func (c *currentServer) set(s *server.Server) {
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
}

// DefaultRouting routes everything to the fake backend.
const DefaultRouting = `default_class: fake
classes:
  fake: {backend: fake}
  slow: {backend: fake, image: slow-create}
  broken: {backend: fake, image: fail-create}
  container: {backend: fake, require_isolation: container}
`

// Start brings up the environment.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srvCfg := embednats.Config{StoreDir: t.TempDir(), DontListen: !opts.Listen, Port: -1}
	srv, err := embednats.Start(srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Server: srv, t: t, Bus: bus.Config{LeaseTTL: 3 * time.Second, Memory: opts.Memory},
		srvCfg: srvCfg, current: &currentServer{s: srv.Server}}
	if opts.Listen {
		env.URL = srv.ClientURL()
	}
	ctx, cancel := context.WithCancel(context.Background())
	env.cancel = cancel
	t.Cleanup(env.stop)

	routingYAML := opts.Routing
	if routingYAML == "" {
		routingYAML = DefaultRouting
	}
	routing, err := router.ParseRouting([]byte(routingYAML))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < max(opts.Routers, 1); i++ {
		rcfg := router.Config{Routing: routing, Bus: env.Bus, Logger: log}
		if opts.Router != nil {
			opts.Router(&rcfg)
		}
		rsvc, err := router.New(rcfg, env.conn("router"))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := env.run(func() error { return rsvc.Run(rctx) })
		env.routers = append(env.routers, stoppable{cancel: rcancel, done: done})
	}

	backend := opts.Backend
	if backend == nil {
		env.Fake = fake.New(fake.Config{})
		backend = env.Fake
	}
	for i := 0; i < max(opts.Workers, 1); i++ {
		wcfg := worker.Config{Bus: env.Bus, Logger: log, KillOnShutdown: true}
		if opts.Worker != nil {
			opts.Worker(&wcfg)
		}
		wnc := env.conn("worker")
		env.workerConns = append(env.workerConns, wnc)
		w, err := worker.New(wcfg, wnc, backend)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			env.WorkerID = w.ID()
		}
		env.run(func() error { return w.Run(ctx) })
	}

	cl, err := client.New(env.conn("client"), client.WithTeardownGrace(2*time.Second), client.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	env.Client = cl
	env.WaitForBackend(backend.Info().Name)
	return env
}

// conn opens an in-process connection closed at cleanup.
func (e *Env) conn(name string) *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(e.current), nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.conns = append(e.conns, nc)
	return nc
}

// Conn opens another in-process connection, closed at cleanup (after the
// services have stopped).
func (e *Env) Conn(name string) *nats.Conn { return e.conn(name) }

func (e *Env) run(f func() error) chan struct{} {
	done := make(chan struct{})
	e.done = append(e.done, done)
	go func() {
		defer close(done)
		if err := f(); err != nil {
			e.t.Errorf("service failed: %v", err)
		}
	}()
	return done
}

// StopRouters stops every router cleanly (pending requests are answered
// BackendUnavailable) and waits for them.
func (e *Env) StopRouters() {
	e.t.Helper()
	for _, r := range e.routers {
		r.cancel()
	}
	for _, r := range e.routers {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			e.t.Fatalf("a router did not stop within 30s")
		}
	}
}

// RestartServer shuts the NATS server down and starts a new one on the same
// store directory (and, when listening, the same port). Every connection of
// the environment reconnects to it; JetStream state survives.
func (e *Env) RestartServer() {
	e.t.Helper()
	cfg := e.srvCfg
	if !cfg.DontListen {
		u, err := url.Parse(e.Server.ClientURL())
		if err != nil {
			e.t.Fatal(err)
		}
		if cfg.Port, err = strconv.Atoi(u.Port()); err != nil {
			e.t.Fatal(fmt.Errorf("server port: %w", err))
		}
	}
	e.Server.Stop()
	srv, err := embednats.Start(cfg)
	if err != nil {
		e.t.Fatalf("restart server: %v", err)
	}
	e.Server = srv
	e.current.set(srv.Server)
}

func (e *Env) stop() {
	e.cancel()
	for _, d := range e.done {
		select {
		case <-d:
		case <-time.After(30 * time.Second):
			e.t.Errorf("a service did not stop within 30s")
		}
	}
	for _, nc := range e.conns {
		nc.Close()
	}
	e.Server.Stop()
}

// CrashWorkers cuts every worker off the bus without a clean shutdown: no
// reply, no lease withdrawal. Their leases expire after Bus.LeaseTTL.
func (e *Env) CrashWorkers() {
	for _, nc := range e.workerConns {
		nc.Close()
	}
}

// WaitForBackend polls until the router sees a live worker of backend.
func (e *Env) WaitForBackend(backend string) {
	e.t.Helper()
	Eventually(e.t, 15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		b, err := e.Client.Backends(ctx)
		if err != nil {
			return false
		}
		for _, x := range b.Backends {
			if x.Name == backend && len(x.Workers) > 0 {
				return true
			}
		}
		return false
	}, "backend %s never became live", backend)
}

// Create creates a sandbox with a 5-minute lifetime on the default class.
func (e *Env) Create(ctx context.Context) *events.CreateReply {
	e.t.Helper()
	r, err := e.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return r
}

// Eventually polls cond every 10 ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, with a deadline
	}
}
