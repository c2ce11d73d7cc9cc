package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/gateway"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
	"github.com/sandboxio/sandboxio/services/router"
)

// allInOneConfig is what `dev` and `demo` share.
type allInOneConfig struct {
	dataDir     string
	listen      string // host:port, empty = in-process only
	routingFile string
	backends    []string // which workers to start: fake, docker, e2b
	killOnExit  bool
	// auth runs the account layout of internal/auth (in dataDir/auth):
	// every service connects with its own creds.
	auth bool
	// gateway runs the ports gateway (nil: none); gatewayAnyPort lets it
	// take another port when its listen address is in use.
	gateway        *gatewayFlags
	gatewayAnyPort bool
	// reservedPorts can never be published (router.Config.ReservedPorts).
	reservedPorts []int
	// bus is the bus's configuration (set by startAllInOne).
	bus bus.Config
}

// allInOne is a running embedded deployment.
type allInOne struct {
	srv     *embednats.Server
	url     string
	conns   []*nats.Conn
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errs    chan error
	log     *slog.Logger
	closer  []func()
	dataDir string
	// layout is the account layout when auth is on, nil when open.
	layout  *auth.Layout
	tenants []*auth.Tenant
	// backends are the backends whose workers started.
	backends []string
	// metrics are the services' /metrics handlers, served together on
	// SBX_METRICS_ADDR.
	metrics []http.Handler
	// gateway is the ports gateway, nil when not started.
	gateway *gateway.Service
}

func startAllInOne(ctx context.Context, cfg allInOneConfig, log *slog.Logger) (*allInOne, error) {
	ec := embednats.Config{StoreDir: filepath.Join(cfg.dataDir, "jetstream"), ServerName: "sandboxio-dev"}
	if cfg.listen == "" {
		ec.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %w", cfg.listen, err)
		}
		ec.Host = host
		if ec.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("--listen %q: bad port", cfg.listen)
		}
	}
	if err := os.MkdirAll(ec.StoreDir, 0o755); err != nil {
		return nil, err
	}
	var layout *auth.Layout
	var tenants []*auth.Tenant
	if cfg.auth {
		var err error
		if layout, tenants, err = devLayout(filepath.Join(cfg.dataDir, "auth")); err != nil {
			return nil, err
		}
		ec.ConfigFile = layout.ConfigFile()
	}
	srv, err := embednats.Start(ec)
	if err != nil {
		return nil, err
	}
	a := &allInOne{srv: srv, errs: make(chan error, 16), log: log, dataDir: cfg.dataDir, layout: layout, tenants: tenants}
	if !ec.DontListen {
		a.url = srv.ClientURL()
	}
	rctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel

	routing, err := router.LoadRouting(cfg.routingFile)
	if err != nil {
		a.stop()
		return nil, err
	}
	// One process: it owns the bus's configuration. Its limits fit the
	// embedded server's store (a small disk scales the defaults down).
	busCfg := bus.Config{Owner: true, StoreLimit: srv.JetStreamConfig().MaxStore, Logger: log}
	if err := busLimitsFromEnv(&busCfg); err != nil {
		a.stop()
		return nil, err
	}
	cfg.bus = busCfg
	if layout != nil {
		// The streams and buckets are created by admin: only admin may
		// change SBX_OPS, and the tenants' quotas go into sbx_tenants.
		if err := a.adminSetup(ctx, busCfg); err != nil {
			a.stop()
			return nil, err
		}
	}
	rnc, err := a.connAs("sandboxio-router", auth.RoleRouter)
	if err != nil {
		a.stop()
		return nil, err
	}
	// With auth, the router signs its commands with the layout's key and
	// the workers run only commands signed by the router or the reaper.
	var routerSeed []byte
	var commanders []string
	if layout != nil {
		if routerSeed, commanders, err = layoutCommandKeys(layout); err != nil {
			a.stop()
			return nil, err
		}
	}
	var gwURL, gwDomain string
	var linkKey []byte
	if cfg.gateway != nil {
		// One process: the router and the gateway share a port link key
		// made for this run (links and cookies end with it).
		if linkKey, err = portauth.NewKey(); err != nil {
			a.stop()
			return nil, fmt.Errorf("port link key: %w", err)
		}
		cfg.gateway.linkKey = linkKey
		if gwURL, err = a.startGateway(rctx, cfg, routerSeed, log); err != nil {
			a.stop()
			return nil, err
		}
		gwDomain = cfg.gateway.domain
	}
	rsvc, err := router.New(router.Config{Routing: routing, Bus: busCfg, Logger: log, SigningSeed: routerSeed,
		GatewayURL: gwURL, GatewayDomain: gwDomain, ReservedPorts: cfg.reservedPorts, PortLinkKey: linkKey}, rnc)
	if err != nil {
		a.stop()
		return nil, err
	}
	a.goRun("router", func() error { return rsvc.Run(rctx) })
	a.metrics = append(a.metrics, rsvc.MetricsHandler())

	for _, name := range cfg.backends {
		backend, closeFn, workerID, err := openBackend(ctx, name, log)
		if err != nil {
			log.Warn("backend not started", "backend", name, slog.Any("err", err))
			continue
		}
		if closeFn != nil {
			a.closer = append(a.closer, closeFn)
		}
		wnc, err := a.connAs("sandboxio-worker-"+name, auth.RoleWorker)
		if err != nil {
			a.stop()
			return nil, err
		}
		var scopes map[string][]string
		if layout != nil {
			// The reaper's key commands kills only.
			if scopes, err = auth.ReadCommandScopes(layout.CommandScopesFile()); err != nil {
				a.stop()
				return nil, err
			}
		}
		wcfg, err := workerConfig(worker.Config{WorkerID: workerID, Bus: busCfg, Logger: log, KillOnShutdown: cfg.killOnExit,
			TrustedCommandSigners: commanders, CommandScopes: scopes, ReservedPorts: cfg.reservedPorts})
		if err != nil {
			a.stop()
			return nil, err
		}
		if layout != nil {
			keys := workerKeys{sealFile: layout.SealKeyFile(), signingFile: layout.SigningKeyFile(name)}
			if wcfg.SealSeed, wcfg.SigningSeed, err = keys.load(); err != nil {
				a.stop()
				return nil, err
			}
		}
		w, err := worker.New(wcfg, wnc, backend)
		if err != nil {
			a.stop()
			return nil, err
		}
		a.goRun(name+"-worker", func() error { return w.Run(rctx) })
		a.backends = append(a.backends, name)
	}
	if err := startOpsServices(rctx, a, log); err != nil {
		a.stop()
		return nil, err
	}
	if addr := os.Getenv("SBX_METRICS_ADDR"); addr != "" {
		h := joinMetrics(a.metrics...)
		a.goRun("metrics", func() error { return telemetry.ServeMetrics(rctx, addr, h, log) })
	}
	return a, nil
}

// startGateway starts the ports gateway on a connection of its own and
// returns its base URL. With auth it connects as the layout's gateway user
// and signs its opens with the gateway's key (a layout written before the
// gateway had its own: the router's creds and key, routerSeed).
func (a *allInOne) startGateway(ctx context.Context, cfg allInOneConfig, routerSeed []byte, log *slog.Logger) (string, error) {
	role, seed := auth.RoleGateway, []byte(nil)
	if a.layout != nil {
		keyFile := a.layout.SigningKeyFile(auth.GatewaySigner)
		_, errCreds := os.Stat(a.layout.Creds(auth.RoleGateway))
		_, errKey := os.Stat(keyFile)
		if errCreds != nil || errKey != nil {
			role, seed = auth.RoleRouter, routerSeed
		} else {
			var err error
			if _, seed, err = (&workerKeys{signingFile: keyFile}).load(); err != nil {
				return "", fmt.Errorf("gateway signing key: %w", err)
			}
		}
	}
	gnc, err := a.connAs("sandboxio-gateway", role)
	if err != nil {
		return "", err
	}
	f := *cfg.gateway
	if f.e2bListen != "" {
		// The E2B-compatible API acts for tenants on the layout's e2b user.
		if f.e2b, err = a.startE2BAPI(ctx, cfg, log); err != nil {
			return "", err
		}
	}
	svc, closeDialer, err := startGateway(gnc, &f, seed, log)
	if err != nil && cfg.gatewayAnyPort {
		log.Warn("gateway address in use; taking another port", "addr", f.listen, slog.Any("err", err))
		host, _, _ := net.SplitHostPort(f.listen)
		f.listen = net.JoinHostPort(host, "0")
		svc, closeDialer, err = startGateway(gnc, &f, seed, log)
	}
	if err != nil {
		return "", err
	}
	a.closer = append(a.closer, closeDialer)
	a.gateway = svc
	a.goRun("gateway", func() error { return svc.Run(ctx) })
	a.metrics = append(a.metrics, svc.MetricsHandler())
	return gatewayBaseURL(svc, f.certFile != "" || f.publicHTTPS), nil
}

// startE2BAPI opens the E2B-compatible API on a connection of its own: the
// layout's e2b user with auth, an open one without (the bus, whose
// sbx_apikeys the API opens, is made first then: the router has not yet).
func (a *allInOne) startE2BAPI(ctx context.Context, cfg allInOneConfig, log *slog.Logger) (http.Handler, error) {
	enc, err := a.connAs("sandboxio-e2b-api", auth.RoleE2B)
	if err != nil {
		return nil, err
	}
	if a.layout == nil {
		js, err := jetstream.New(enc)
		if err != nil {
			return nil, err
		}
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := bus.EnsureWithRetry(ectx, js, cfg.bus); err != nil {
			return nil, err
		}
	}
	api, err := e2bapi.New(e2bapi.Config{Conn: enc, Logger: log})
	if err != nil {
		return nil, err
	}
	a.closer = append(a.closer, api.Close)
	return api, nil
}

// conn opens an in-process connection: as admin when auth is on (the
// demo's client, the operator), else open.
func (a *allInOne) conn(name string) (*nats.Conn, error) { return a.connAs(name, auth.RoleAdmin) }

// connAs opens an in-process connection with role's creds when auth is on.
func (a *allInOne) connAs(name, role string) (*nats.Conn, error) {
	var opts []nats.Option
	if a.layout != nil {
		opts = append(opts, nats.UserCredentials(a.layout.Creds(role)))
	}
	nc, err := a.srv.Connect(name, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", role, err)
	}
	a.conns = append(a.conns, nc)
	return nc, nil
}

// adminSetup creates the bus and stores the example tenants' records.
func (a *allInOne) adminSetup(ctx context.Context, busCfg bus.Config) error {
	nc, err := a.connAs("sandboxio-dev-admin", auth.RoleAdmin)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := bus.EnsureWithRetry(ectx, js, busCfg); err != nil {
		return err
	}
	for _, t := range a.tenants {
		if err := storeTenant(ectx, nc, t.Record, 1); err != nil {
			return err
		}
	}
	return nil
}

// layoutCommandKeys reads the router's command-signing seed and the
// trusted commanders of a layout. A layout from before command signing has
// neither file: the router then signs with a new key and the workers accept
// unsigned commands, as before.
func layoutCommandKeys(l *auth.Layout) ([]byte, []string, error) {
	if _, err := os.Stat(l.CommandersFile()); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	_, seed, err := (&workerKeys{signingFile: l.SigningKeyFile(auth.RouterSigner)}).load()
	if err != nil {
		return nil, nil, fmt.Errorf("router signing key: %w", err)
	}
	commanders, err := readSigners(l.CommandersFile(), "--trusted-commanders")
	if err != nil {
		return nil, nil, fmt.Errorf("trusted commanders: %w", err)
	}
	return seed, commanders, nil
}

// devTenants are the example tenants of `dev --auth`.
var devTenants = []string{"tenant-a", "tenant-b"}

// devLayout opens the layout in dir, creating it and the example tenants
// the first time, so that a restarted dev keeps its creds.
func devLayout(dir string) (*auth.Layout, []*auth.Tenant, error) {
	l, err := auth.Load(dir)
	if errors.Is(err, auth.ErrNotInitialized) {
		l, _, err = auth.Init(dir)
	}
	if err != nil {
		return nil, nil, err
	}
	// A data directory older than the e2b front door's user gets it.
	if _, err := auth.EnsureE2BCreds(dir); err != nil {
		return nil, nil, err
	}
	var ts []*auth.Tenant
	for _, name := range devTenants {
		t, err := auth.LoadTenant(dir, name)
		if err != nil {
			if t, err = auth.AddTenant(dir, name, events.TenantLimits{}); err != nil {
				return nil, nil, err
			}
		}
		ts = append(ts, t)
	}
	return l, ts, nil
}

func (a *allInOne) goRun(name string, f func() error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := f(); err != nil && !errors.Is(err, context.Canceled) {
			a.log.Error("service failed", "component", name, slog.Any("err", err))
			a.errs <- fmt.Errorf("%s: %w", name, err)
		}
	}()
}

// stop shuts every service down, then the server.
func (a *allInOne) stop() {
	if a.cancel != nil {
		a.cancel()
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		a.log.Error("services did not stop within 60s")
	}
	for _, c := range a.closer {
		c()
	}
	for _, nc := range a.conns {
		nc.Close()
	}
	a.srv.Stop()
}

// openBackend builds a backend by name. workerID is fixed up front because
// some backends label what they create with it.
func openBackend(ctx context.Context, name string, log *slog.Logger) (worker.Backend, func(), string, error) {
	workerID := events.NewID()
	switch name {
	case "fake":
		return fake.New(fake.Config{}), nil, workerID, nil
	}
	if open, ok := backendOpeners[name]; ok {
		b, closeFn, err := open(ctx, workerID, log)
		return b, closeFn, workerID, err
	}
	return nil, nil, "", fmt.Errorf("unknown backend %q", name)
}

// backendOpeners holds the real backends, registered by backends.go.
var backendOpeners = map[string]func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error){}

// startOpsServices starts the auditor and reaper when they are built in.
var startOpsServices = func(ctx context.Context, a *allInOne, log *slog.Logger) error { return nil }
