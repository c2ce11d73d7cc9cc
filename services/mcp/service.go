package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/client"
)

// Version is the server's version as it tells MCP clients.
const Version = "0.1.0"

// Config configures the server.
type Config struct {
	// Client reaches the deployment (its credentials are the caller's).
	Client *client.Client
	Logger *slog.Logger
	// HTTPAddr serves streamable HTTP on this address (path /mcp) instead
	// of stdio.
	HTTPAddr string
	// Listener, if set, is used instead of listening on HTTPAddr (tests).
	Listener net.Listener
	// Stdin and Stdout are the stdio transport's (default os.Stdin and
	// os.Stdout).
	Stdin  io.ReadCloser
	Stdout io.WriteCloser

	// Class is the class of sandboxes created without one ("" is the
	// deployment's default class).
	Class string
	// Lifetime is the lifetime of sandboxes created without one (default
	// 30 min); MaxLifetime caps what a tool call may ask (default 24 h).
	Lifetime, MaxLifetime time.Duration
	// ExecTimeout bounds run_command and run_code when the call gives no
	// timeout (default 2 min); MaxExecTimeout caps what a call may ask
	// (default 30 min).
	ExecTimeout, MaxExecTimeout time.Duration
	// MaxOutputBytes is how much of each of stdout and stderr a result
	// shows; longer output is cut in the middle, keeping its head and tail
	// (default 16 KiB).
	MaxOutputBytes int
	// MaxFileBytes bounds read_file and write_file (default 8 MiB).
	MaxFileBytes int
	// KillGrace bounds the kills of a session's sandboxes when the session
	// ends (default 10 s).
	KillGrace time.Duration
	// SessionIdle closes an HTTP session after this long without a request
	// (default 30 min).
	SessionIdle time.Duration
}

// Server is the MCP server.
type Server struct {
	cfg Config
	log *slog.Logger
	srv *mcp.Server

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	// reapers are the goroutines waiting for sessions to end.
	reapers sync.WaitGroup
}

// New checks the config and registers the tools.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("mcpserver: Config.Client is nil")
	}
	setDefault(&cfg.Lifetime, 30*time.Minute)
	setDefault(&cfg.MaxLifetime, 24*time.Hour)
	setDefault(&cfg.ExecTimeout, 2*time.Minute)
	setDefault(&cfg.MaxExecTimeout, 30*time.Minute)
	setDefault(&cfg.KillGrace, 10*time.Second)
	setDefault(&cfg.SessionIdle, 30*time.Minute)
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 16 << 10
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 8 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: map[*mcp.ServerSession]*session{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "sandboxio", Title: "sandboxio sandboxes", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       cfg.Logger,
		// The session-based protocol versions: sandboxes belong to a
		// session and are killed when it ends, which the sessionless
		// 2026-07-28 protocol has no notion of.
		SupportedProtocolVersions: sessionVersions(),
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.srv.AddReceivingMiddleware(argumentErrors)
	s.addTools()
	return s, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// sessionVersions are the protocol versions the SDK supports that have
// sessions (initialize handshake).
func sessionVersions() []string {
	var out []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			out = append(out, v)
		}
	}
	return out
}

const instructions = `sandboxio runs code in isolated, disposable sandboxes. Call create_sandbox first; ` +
	`pass its sandbox_id to the other tools. Sandboxes you create are killed when this session ends, ` +
	`and at the end of their lifetime (set_timeout extends it). Errors name an SBX code and say whether to retry.`

// MCP is the underlying go-sdk server (to serve it on another transport).
func (s *Server) MCP() *mcp.Server { return s.srv }

// Handler is the streamable HTTP handler (serve it at /mcp).
func (s *Server) Handler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: s.cfg.SessionIdle, Logger: s.log,
			// A write_file of MaxFileBytes, base64, and the JSON around it.
			MaxRequestBodyBytes: int64(s.cfg.MaxFileBytes)*4/3 + 1<<20})
}

// Run serves stdio, or streamable HTTP when HTTPAddr or Listener is set,
// until ctx is done or (stdio) the client closes stdin; then every
// session's sandboxes are killed within KillGrace, and Run returns.
func (s *Server) Run(ctx context.Context) error {
	var err error
	if s.cfg.HTTPAddr != "" || s.cfg.Listener != nil {
		err = s.runHTTP(ctx)
	} else {
		err = s.runStdio(ctx)
	}
	s.closeSessions()
	s.reapers.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Server) runStdio(ctx context.Context) error {
	var t mcp.Transport = &mcp.StdioTransport{}
	if s.cfg.Stdin != nil || s.cfg.Stdout != nil {
		t = &mcp.IOTransport{Reader: s.cfg.Stdin, Writer: s.cfg.Stdout}
	}
	s.log.Info("mcp serving on stdio")
	err := s.srv.Run(ctx, t)
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil
	}
	return err
}

func (s *Server) runHTTP(ctx context.Context) error {
	l := s.cfg.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("mcpserver: listen: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	s.log.Info("mcp serving streamable HTTP", "url", "http://"+l.Addr().String()+"/mcp")
	select {
	case err := <-errc:
		return fmt.Errorf("mcpserver: serve: %w", err)
	case <-ctx.Done():
	}
	s.closeSessions() // ends streams that Shutdown would wait for
	// Shutdown is teardown: Run's values, not its cancellation.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}

// closeSessions closes every open MCP session; their reapers then kill
// their sandboxes.
func (s *Server) closeSessions() {
	for ss := range s.srv.Sessions() {
		_ = ss.Close()
	}
}
