package embednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures the embedded server.
type Config struct {
	// StoreDir holds JetStream's files; empty means a memory-only server is
	// not allowed, so callers pass a temporary directory in tests.
	StoreDir string
	// Host and Port to listen on for other processes; Port -1 picks a free
	// port; DontListen serves in-process connections only.
	Host       string
	Port       int
	DontListen bool
	// ServerName must be unique and stable per node in a cluster: JetStream
	// identifies a node's Raft state by it, so a restarted node keeps its
	// name, StoreDir and cluster port.
	ServerName string
	// MaxPayload raises the server's message size limit (default 8 MiB).
	MaxPayload int32

	// ClusterName turns the server into a node of a JetStream cluster. It
	// listens for routes on ClusterHost:ClusterPort (default 0.0.0.0:6222;
	// -1 picks a free port) and connects to Routes, the cluster URLs of every
	// node (nats-route://host:port, its own included). A JetStream cluster
	// needs routes: ClusterName without Routes is an error.
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string
	// ClusterAdvertise is the host:port peers are told to reach this node's
	// cluster port at (gossip of implicit routes), when the listen address
	// is not reachable from them (NAT, proxies); default: the listen address.
	ClusterAdvertise string

	// MonitorHost:MonitorPort serves nats-server's HTTP monitoring
	// (/healthz, /varz, /jsz …); MonitorPort 0 leaves it off.
	MonitorHost string
	MonitorPort int

	Logger *slog.Logger
	// LogNotices logs the server's notices at Info (a standalone node);
	// by default they are Debug, as the server is a detail of the process.
	LogNotices bool
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 15 s.
	ReadyTimeout time.Duration

	// ConfigFile is a nats-server configuration file to start from, e.g.
	// the account layout `sandboxio auth init` writes (operator, system
	// account, resolver). The fields above override what it sets for
	// listening, JetStream, names and clustering; its authentication
	// (operator mode, accounts, users) is kept as it is.
	ConfigFile string
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
}

// Options returns the nats-server options for cfg, after defaults and
// validation.
func (cfg Config) Options() (*server.Options, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embednats: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "sandboxio-dev"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 8 << 20
	}
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		fo, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embednats: config %s: %w", cfg.ConfigFile, err)
		}
		opts = fo
	}
	opts.ServerName = cfg.ServerName
	opts.Host = cfg.Host
	opts.Port = cfg.Port
	opts.DontListen = cfg.DontListen
	opts.JetStream = true
	opts.StoreDir = cfg.StoreDir
	opts.NoSigs = true
	opts.NoLog = cfg.Logger == nil
	opts.MaxPayload = cfg.MaxPayload
	// Generous write deadline: a streaming test may briefly saturate a pipe.
	opts.WriteDeadline = 10 * time.Second
	if cfg.MonitorPort != 0 {
		opts.HTTPHost = cfg.MonitorHost
		if opts.HTTPHost == "" {
			opts.HTTPHost = cfg.Host
		}
		opts.HTTPPort = cfg.MonitorPort
	}
	if cfg.ClusterName == "" {
		if len(cfg.Routes) > 0 {
			return nil, errors.New("embednats: Routes need a ClusterName")
		}
		return opts, nil
	}
	if len(cfg.Routes) == 0 {
		return nil, errors.New("embednats: a JetStream cluster needs Routes (the cluster URLs of every node)")
	}
	if cfg.DontListen {
		return nil, errors.New("embednats: a cluster node must listen (DontListen is for a single server)")
	}
	routes, err := ParseRoutes(strings.Join(cfg.Routes, ","))
	if err != nil {
		return nil, err
	}
	opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort,
		Advertise: cfg.ClusterAdvertise}
	if opts.Cluster.Host == "" {
		opts.Cluster.Host = "0.0.0.0"
	}
	if opts.Cluster.Port == 0 {
		opts.Cluster.Port = 6222
	}
	opts.Routes = routes
	return opts, nil
}

// ParseRoutes parses a comma-separated list of route URLs
// (nats-route://host:port; nats:// is accepted too). Empty items are skipped.
func ParseRoutes(s string) ([]*url.URL, error) {
	var out []*url.URL
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		u, err := url.Parse(item)
		if err != nil {
			return nil, fmt.Errorf("embednats: route %q: %w", item, err)
		}
		switch u.Scheme {
		case "nats-route", "nats":
		default:
			return nil, fmt.Errorf("embednats: route %q: want nats-route://host:port", item)
		}
		if u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("embednats: route %q: want nats-route://host:port", item)
		}
		out = append(out, u)
	}
	return out, nil
}

// Start starts the server and waits until it accepts connections. A cluster
// node accepts connections before the cluster has elected a JetStream meta
// leader; callers that create streams retry (bus.EnsureWithRetry).
func Start(cfg Config) (*Server, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embednats: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(&logAdapter{l: cfg.Logger.With("component", "nats-server"), notices: cfg.LogNotices}, false, false, false)
	}
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 15 * time.Second
	}
	go s.Start()
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embednats: server %s not ready within %s", opts.ServerName, wait)
	}
	return &Server{s}, nil
}

// Run runs a standalone node until ctx ends, then shuts it down; it is the
// `sandboxio nats-server` command. It returns an error if the node cannot
// start or stops on its own.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	if cfg.Logger != nil {
		attrs := []any{slog.String("server_name", s.Name()), slog.String("client_url", s.ClientURL())}
		if cfg.ClusterName != "" {
			attrs = append(attrs, slog.String("cluster", cfg.ClusterName), slog.Any("routes", cfg.Routes))
		}
		if a := s.MonitorAddr(); a != nil {
			attrs = append(attrs, slog.String("monitor", a.String()))
		}
		cfg.Logger.Info("nats server ready", attrs...)
	}
	stopped := make(chan struct{})
	go func() {
		s.WaitForShutdown()
		close(stopped)
	}()
	select {
	case <-ctx.Done():
		s.Stop()
		<-stopped
		return nil
	case <-stopped:
		return errors.New("embednats: server stopped")
	}
}

// Connect opens an in-process connection named name.
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.Server), nats.Name(name), nats.MaxReconnects(-1)}, opts...)
	return nats.Connect("", opts...)
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

type logAdapter struct {
	l       *slog.Logger
	notices bool
}

func (a *logAdapter) Noticef(format string, v ...any) {
	if a.notices {
		a.l.Info(fmt.Sprintf(format, v...))
		return
	}
	a.l.Debug(fmt.Sprintf(format, v...))
}
func (a *logAdapter) Warnf(format string, v ...any)  { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Errorf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Tracef(format string, v ...any) {}
