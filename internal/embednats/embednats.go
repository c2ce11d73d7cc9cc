package embednats

import (
	"fmt"
	"log/slog"
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
	ServerName string
	// MaxPayload raises the server's message size limit (default 8 MiB).
	MaxPayload int32
	Logger     *slog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("embednats: StoreDir is required")
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
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		DontListen: cfg.DontListen,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      cfg.Logger == nil,
		MaxPayload: cfg.MaxPayload,
		// Generous write deadline: a streaming test may briefly saturate a pipe.
		WriteDeadline: 10 * time.Second,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embednats: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(&logAdapter{l: cfg.Logger.With("component", "nats-server")}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embednats: server not ready within 15s")
	}
	return &Server{s}, nil
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

type logAdapter struct{ l *slog.Logger }

func (a *logAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Tracef(format string, v ...any)  {}
