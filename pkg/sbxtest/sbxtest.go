package sbxtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/bus"
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
	// Bus adjusts the streams' configuration (e.g. SBX_OUT's byte limit).
	Bus func(*bus.Config)
	// Listen makes the server listen on a random TCP port (Env.URL) for
	// other processes; otherwise only in-process connections work.
	Listen bool
	Logger *slog.Logger
	// Routers and Workers start that many instances (default 1 each); extra
	// workers run the same backend value.
	Routers, Workers int
	// Memory keeps every stream in memory (benchmarks).
	Memory bool
	// Auth runs the authenticated layout (internal/authtest: operator,
	// services account, tenants A and B) on a real server over TCP: every
	// service connects with its own creds, Env.Client is tenant A. The
	// environment variable SBX_TEST_AUTH=1 turns it on for every Start, so
	// that the suites built on sbxtest run in both modes.
	Auth bool
}

// authFromEnv reports whether SBX_TEST_AUTH asks for the authenticated mode.
func authFromEnv() bool { return os.Getenv("SBX_TEST_AUTH") == "1" }

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
	workers []stoppable
	// workerSvcs are the running workers, for RecordsUnsettled.
	workerSvcs []*worker.Worker
	// crashed is set by CrashWorkers: the workers' Run may then fail.
	crashed atomic.Bool

	// Auth is the authenticated layout when Options.Auth is set.
	Auth *authtest.Env

	// RouterServices are the running routers (their MetricsHandler…).
	RouterServices []*router.Service
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
	env := &Env{t: t, Bus: bus.Config{LeaseTTL: 3 * time.Second, Memory: opts.Memory}}
	if opts.Bus != nil {
		opts.Bus(&env.Bus)
	}
	if opts.Auth || authFromEnv() {
		env.Auth = authtest.Start(t)
		env.Server, env.URL, env.srvCfg = env.Auth.Server, env.Auth.URL, env.Auth.ServerConfig
		if opts.Bus != nil {
			env.Auth.EnsureBus(t, env.Bus)
		}
	} else {
		srvCfg := embednats.Config{StoreDir: t.TempDir(), DontListen: !opts.Listen, Port: -1}
		srv, err := embednats.Start(srvCfg)
		if err != nil {
			t.Fatal(err)
		}
		env.Server, env.srvCfg = srv, srvCfg
		if opts.Listen {
			env.URL = srv.ClientURL()
		}
	}
	env.current = &currentServer{s: env.Server.Server}
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
		if env.Auth != nil {
			// The workers run only commands signed by the router or the reaper.
			rcfg.SigningSeed = env.SigningSeed(auth.RouterSigner)
		}
		if opts.Router != nil {
			opts.Router(&rcfg)
		}
		rsvc, err := router.New(rcfg, env.conn(auth.RoleRouter))
		if err != nil {
			t.Fatal(err)
		}
		env.RouterServices = append(env.RouterServices, rsvc)
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
		if env.Auth != nil {
			wcfg.SealSeed, wcfg.SigningSeed = env.workerSeeds()
			wcfg.TrustedCommandSigners = env.commanders()
			wcfg.CommandScopes = env.commandScopes()
		}
		if opts.Worker != nil {
			opts.Worker(&wcfg)
		}
		wnc := env.conn(auth.RoleWorker)
		env.workerConns = append(env.workerConns, wnc)
		w, err := worker.New(wcfg, wnc, backend)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			env.WorkerID = w.ID()
		}
		env.workerSvcs = append(env.workerSvcs, w)
		wctx, wcancel := context.WithCancel(ctx)
		done := env.run(func() error {
			err := w.Run(wctx)
			if env.crashed.Load() {
				return nil // cut off by CrashWorkers: whatever it says is expected
			}
			return err
		})
		env.workers = append(env.workers, stoppable{cancel: wcancel, done: done})
	}

	clientConn := "client"
	if env.Auth != nil {
		clientConn = authtest.TenantA
	}
	cl, err := client.New(env.conn(clientConn), client.WithTeardownGrace(2*time.Second), client.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	env.Client = cl
	env.WaitForBackend(backend.Info().Name)
	return env
}

// conn opens an in-process connection closed at cleanup. In the
// authenticated mode it connects over TCP with the creds of name: a
// services role (auth.Role…), a tenant (authtest.TenantA, TenantB), and
// the admin's for any other name.
func (e *Env) conn(name string) *nats.Conn {
	e.t.Helper()
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	url := ""
	if e.Auth != nil {
		url = e.Auth.URL
		opts = append(opts, nats.UserCredentials(e.credsFor(name)))
	} else {
		opts = append(opts, nats.InProcessServer(e.current))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.conns = append(e.conns, nc)
	return nc
}

func (e *Env) credsFor(name string) string {
	switch name {
	case auth.RoleRouter, auth.RoleWorker, auth.RoleAuditor, auth.RoleReaper, auth.RoleSys, auth.RoleGateway:
		return e.Auth.Creds(name)
	case authtest.TenantA, authtest.TenantB:
		return e.Auth.TenantCreds(name)
	}
	return e.Auth.Creds(auth.RoleAdmin)
}

// workerSeeds reads the layout's sealing seed and the first worker's
// signing seed.
func (e *Env) workerSeeds() (seal, sign []byte) {
	e.t.Helper()
	var err error
	if seal, err = os.ReadFile(e.Auth.Layout.SealKeyFile()); err != nil {
		e.t.Fatal(err)
	}
	if sign, err = os.ReadFile(e.Auth.Layout.SigningKeyFile(auth.DefaultWorkers[0])); err != nil {
		e.t.Fatal(err)
	}
	return bytes.TrimSpace(seal), bytes.TrimSpace(sign)
}

// SigningSeed is the layout's signing seed of signer (auth.RouterSigner,
// auth.ReaperSigner or a worker) in the authenticated mode, nil in the open
// one: a reaper a test starts signs its kills with
// SigningSeed(auth.ReaperSigner) so that the workers run them.
func (e *Env) SigningSeed(signer string) []byte {
	e.t.Helper()
	if e.Auth == nil {
		return nil
	}
	seed, err := os.ReadFile(e.Auth.Layout.SigningKeyFile(signer))
	if err != nil {
		e.t.Fatal(err)
	}
	return bytes.TrimSpace(seed)
}

// SignCommand signs a complete command message with the router's key in
// the authenticated mode (the workers run only commands the router or the
// reaper signed), as a test playing a compromised router would; in the
// open mode it leaves m unsigned, which the workers accept.
func (e *Env) SignCommand(m *nats.Msg) {
	e.t.Helper()
	seed := e.SigningSeed(auth.RouterSigner)
	if seed == nil {
		return
	}
	k, err := recsign.NewKey(seed)
	if err == nil {
		err = k.Sign(m)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// commanders reads the layout's trusted command signers (commanders.txt).
func (e *Env) commanders() []string {
	e.t.Helper()
	b, err := os.ReadFile(e.Auth.Layout.CommandersFile())
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// commandScopes reads the layout's command scopes (command-scopes.txt).
func (e *Env) commandScopes() map[string][]string {
	e.t.Helper()
	scopes, err := auth.ReadCommandScopes(e.Auth.Layout.CommandScopesFile())
	if err != nil {
		e.t.Fatal(err)
	}
	return scopes
}

// Conn opens another connection, closed at cleanup (after the services
// have stopped): in-process, or in the authenticated mode with the creds
// of name (see conn).
func (e *Env) Conn(name string) *nats.Conn { return e.conn(name) }

// TenantClient is a client connected as a tenant of the authenticated
// layout (authtest.TenantA, TenantB, or one added with Auth.AddTenant).
func (e *Env) TenantClient(name string) *client.Client {
	e.t.Helper()
	if e.Auth == nil {
		e.t.Fatal("sbxtest: TenantClient needs Options.Auth")
	}
	nc, err := nats.Connect(e.Auth.URL, nats.UserCredentials(e.Auth.Layout.TenantCreds(name)), nats.Name(name),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.conns = append(e.conns, nc)
	cl, err := client.New(nc, client.WithTeardownGrace(2*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

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

// StopWorkers stops every worker as SIGTERM would (its context ends; no
// kill of its sandboxes unless the worker was configured to) and returns
// how long the slowest took. It fails the test past within.
func (e *Env) StopWorkers(within time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	for _, w := range e.workers {
		w.cancel()
	}
	for _, w := range e.workers {
		select {
		case <-w.done:
		case <-time.After(within - time.Since(start)):
			e.t.Fatalf("a worker did not stop within %s", within)
		}
	}
	return time.Since(start)
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

// RecordsUnsettled is the number of operation records the workers have
// handed over for storing and not yet seen acknowledged (nor given up on):
// zero means SBX_OPS holds every record so far that will ever be stored.
func (e *Env) RecordsUnsettled() int64 {
	var n int64
	for _, w := range e.workerSvcs {
		n += w.RecordsUnsettled()
	}
	return n
}

// CrashWorkers cuts every worker off the bus without a clean shutdown: no
// reply, no lease withdrawal. Their leases expire after Bus.LeaseTTL.
func (e *Env) CrashWorkers() {
	e.crashed.Store(true)
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
func (e *Env) Create(ctx context.Context) *client.Sandbox {
	e.t.Helper()
	r, err := e.Client.Create(ctx, events.CreateRequest{}, client.WithLifetime(5*time.Minute))
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return r
}

// Eventually polls cond every 10 ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if err := poll.Until(context.Background(), within, poll.Bool("condition", cond)); err != nil {
		t.Fatalf(format, args...)
	}
}
