package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// ServerConfig configures a worker's tunnel Server.
type ServerConfig struct {
	// Backend and Worker name the worker: it takes opens on
	// events.TunnelOpenSubject(Backend, Worker).
	Backend, Worker string
	Log             *slog.Logger
	// Open checks an open against what the worker knows (the sandbox is
	// its own and running, the registry record publishes the port) and
	// connects to the port; its error (an *events.Error) is the gateway's
	// answer. It is called after Verify, with a context bounded by
	// OpenTimeout.
	Open func(ctx context.Context, o events.TunnelOpen) (net.Conn, error)
	// Verify checks an open's signature (subject, headers, data); nil
	// accepts every open (open deployments). Its error should be an
	// *events.Error (SBX_E1401, SBX_E1402).
	Verify func(subject string, h nats.Header, data []byte) error
	// MaxConns bounds the connections (and opens in progress) at once;
	// more are refused SBX_E1604 Overloaded. Default 4096.
	MaxConns    int
	Window      int
	OpenTimeout time.Duration
	KeepAlive   time.Duration
	DeadAfter   time.Duration
	IdleTimeout time.Duration
}

// maxOpen bounds an open's body; maxSeen the open ids remembered (each
// for at most a minute, its Sbx-Not-After): past it opens are refused.
const (
	maxOpen = 4 << 10
	maxSeen = 1 << 16
)

// Server is the worker's end: it takes opens, dials through Open and pumps
// bytes between the port's connection and the gateway.
type Server struct {
	nc    *nats.Conn
	cfg   ServerConfig
	log   *slog.Logger
	conns *table
	slots chan struct{}

	mu      sync.Mutex
	seen    map[string]time.Time // open ids taken, until their Sbx-Not-After
	closing bool                 // Run is ending: no goroutine starts
	wg      sync.WaitGroup
	// ready is set once Run has subscribed.
	ready atomic.Bool
}

// NewServer checks the configuration.
func NewServer(nc *nats.Conn, cfg ServerConfig) (*Server, error) {
	if nc == nil || cfg.Open == nil {
		return nil, errors.New("tunnel: a NATS connection and Open are required")
	}
	if !events.ValidID(cfg.Backend) || !events.ValidID(cfg.Worker) {
		return nil, fmt.Errorf("tunnel: backend %q or worker %q is not a valid id", cfg.Backend, cfg.Worker)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Window < MinWindow || cfg.Window > MaxWindow {
		return nil, fmt.Errorf("tunnel: Window %d is outside %d..%d", cfg.Window, MinWindow, MaxWindow)
	}
	if cfg.OpenTimeout <= 0 {
		cfg.OpenTimeout = DefaultOpenTimeout
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	return &Server{nc: nc, cfg: cfg, log: cfg.Log.With("service", "tunnel-server"), conns: newTable(DefaultGrowBudget),
		slots: make(chan struct{}, cfg.MaxConns), seen: make(map[string]time.Time)}, nil
}

// Run serves until ctx ends, then ends every connection and returns once
// every goroutine it started has.
func (s *Server) Run(ctx context.Context) error {
	openSub, err := s.nc.Subscribe(events.TunnelOpenSubject(s.cfg.Backend, s.cfg.Worker), func(m *nats.Msg) { s.onOpen(ctx, m) })
	if err != nil {
		return fmt.Errorf("tunnel: subscribe: %w", err)
	}
	connSub, err := s.nc.Subscribe(events.TunnelWorkerConnSubject(s.cfg.Backend, s.cfg.Worker, "*"), func(m *nats.Msg) {
		if c := s.conns.dispatch(m); c != nil {
			c.handle(m.Data)
		}
	})
	if err != nil {
		_ = openSub.Unsubscribe()
		return fmt.Errorf("tunnel: subscribe: %w", err)
	}
	_ = connSub.SetPendingLimits(1<<20, 1<<30)
	if err := s.nc.Flush(); err == nil {
		s.ready.Store(true)
	}
	stop := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.conns.keepalive(stop, s.cfg.KeepAlive, s.cfg.DeadAfter, s.cfg.IdleTimeout)
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				s.forgetSeen(now)
			}
		}
	}()
	<-ctx.Done()
	_ = openSub.Unsubscribe()
	s.mu.Lock()
	s.closing = true // an open callback still running starts nothing now
	s.mu.Unlock()
	close(stop)
	s.conns.closeAll(events.Errorf(events.CodeWorkerShutdown, "the worker is shutting down"))
	s.wg.Wait()
	_ = connSub.Unsubscribe()
	return nil
}

// Ready reports whether Run has subscribed (the server takes opens).
func (s *Server) Ready() bool { return s.ready.Load() }

// Conns is how many connections the server carries.
func (s *Server) Conns() int { return s.conns.len() }

// onOpen takes an open: cheap checks here, the rest on a goroutine of its
// own (a dial may take the open's timeout).
func (s *Server) onOpen(ctx context.Context, m *nats.Msg) {
	if len(m.Data) > maxOpen {
		return // no reply subject it names is trusted: nothing is answered
	}
	var o events.TunnelOpen
	if err := json.Unmarshal(m.Data, &o); err != nil || !validReply(o) || m.Reply != o.Reply {
		return
	}
	refuse := func(e *events.Error) {
		_ = s.nc.Publish(o.Reply, append([]byte{frameRefuse}, events.EncodeError(e)...))
	}
	notAfter, ok := events.ParseNotAfter(m.Header.Get(events.HeaderNotAfter))
	switch {
	case !ok:
		refuse(events.Errorf(events.CodeInvalidValue, "the open has no Sbx-Not-After"))
		return
	case time.Now().After(notAfter):
		refuse(events.Errorf(events.CodeCommandExpired, "the open arrived after its Sbx-Not-After"))
		return
	case notAfter.After(time.Now().Add(time.Minute)):
		refuse(events.Errorf(events.CodeInvalidValue, "the open's Sbx-Not-After is too far ahead"))
		return
	}
	if s.cfg.Verify != nil {
		if err := s.cfg.Verify(m.Subject, m.Header, m.Data); err != nil {
			refuse(events.AsError(err))
			return
		}
	}
	if m.Header.Get(events.HeaderCEID) != o.Conn || !s.firstSeen(o.Conn, notAfter) {
		refuse(events.Errorf(events.CodeUnauthorized, "the open was replayed (or a minute's opens are too many)"))
		return
	}
	if o.Window < MinWindow || o.Window > MaxWindow || o.Port < events.MinPort || o.Port > events.MaxPort {
		refuse(events.Errorf(events.CodeInvalidValue, "the open's window or port is out of range"))
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		refuse(events.Errorf(events.CodeOverloaded, "the worker carries %d connections already", s.cfg.MaxConns))
		return
	}
	s.mu.Lock()
	if s.closing || ctx.Err() != nil {
		s.mu.Unlock()
		<-s.slots
		refuse(events.Errorf(events.CodeWorkerShutdown, "the worker is shutting down"))
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots }()
		s.serve(ctx, o, refuse)
	}()
}

// validReply: the open's reply subject is a gateway connection's.
func validReply(o events.TunnelOpen) bool {
	if !events.ValidTunnelID(o.Conn) || !strings.HasPrefix(o.Reply, events.SubjectTunnelGatewayPrefix) {
		return false
	}
	gw, conn, ok := strings.Cut(strings.TrimPrefix(o.Reply, events.SubjectTunnelGatewayPrefix), ".")
	return ok && events.ValidTunnelID(gw) && conn == o.Conn
}

// firstSeen records an open id, false when it was seen already.
func (s *Server) firstSeen(id string, until time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.seen[id]; dup || len(s.seen) >= maxSeen {
		return false
	}
	s.seen[id] = until
	return true
}

func (s *Server) forgetSeen(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, until := range s.seen {
		if now.After(until) {
			delete(s.seen, id)
		}
	}
}

// serve dials and then pumps until both directions have ended.
func (s *Server) serve(ctx context.Context, o events.TunnelOpen, refuse func(*events.Error)) {
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpenTimeout)
	pc, err := s.cfg.Open(octx, o)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			err = events.Errorf(events.CodeWorkerShutdown, "the worker is shutting down")
		} else if errors.Is(err, context.DeadlineExceeded) {
			err = events.Errorf(events.CodeWorkerTimeout, "the port did not connect within %s", s.cfg.OpenTimeout)
		}
		refuse(events.AsError(err))
		return
	}
	id := newID()
	c := newConn(s.nc, s.conns, id, s.cfg.Window, Addr{Name: "worker"}, Addr{Name: "gateway"})
	c.credit = o.Window
	c.peer.Store(&o.Reply)
	s.conns.add(c)
	acc, _ := json.Marshal(events.TunnelAccept{Conn: id, Window: s.cfg.Window})
	if err := c.publish(append([]byte{frameAccept}, acc...)); err != nil {
		c.finish(net.ErrClosed, net.ErrClosed, nil, false)
		_ = pc.Close()
		return
	}
	s.log.Debug("port connection opened", "sandbox_id", o.SandboxID, "port", strconv.Itoa(o.Port))
	pump(c, pc)
}

// smallRead is the read buffer of a connection whose reads are small.
const smallRead = 16 << 10

// bigBufs are read buffers of connections in a bulk transfer.
var bigBufs = sync.Pool{New: func() any { b := make([]byte, 5+MaxChunk); return &b }}

// pump carries bytes both ways until both have ended, then closes both.
func pump(c *Conn, pc net.Conn) {
	// Every end of the tunnel (the gateway's close, a lost peer, the idle
	// bound) closes the port's connection, even while both copies are
	// blocked on a server that neither reads nor writes.
	pumped := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-c.Done():
			_ = pc.Close()
		case <-pumped:
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // gateway → port
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := pc.Write(buf[:n]); werr != nil {
					c.abort(fmt.Errorf("tunnel: the port's connection: %w", werr), true)
					_ = pc.Close()
					return
				}
			}
			if err == io.EOF {
				if cw, ok := pc.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				return
			}
			if err != nil {
				_ = pc.Close() // the tunnel ended: the port's connection too
				return
			}
		}
	}()
	// A small buffer while reads are small (a thousand idle WebSockets
	// hold one each); a large one from a pool while they fill it (a
	// download): fewer, larger frames.
	small := make([]byte, 5+smallRead)
	buf := small
	defer func() {
		if big := buf; len(big) > len(small) {
			bigBufs.Put(&big)
		}
	}()
	for { // port → gateway
		n, err := pc.Read(buf[5:])
		if n > 0 {
			full := n == len(buf)-5
			werr := error(nil)
			if _, werr = c.writeFramed(buf[:5+n]); werr == nil {
				switch {
				case full && len(buf) == len(small):
					buf = *bigBufs.Get().(*[]byte)
				case !full && n < smallRead && len(buf) > len(small):
					big := buf
					bigBufs.Put(&big)
					buf = small
				}
			}
			if werr != nil {
				_ = pc.Close()
				break
			}
		}
		if err == io.EOF {
			_ = c.CloseWrite()
			break
		}
		if err != nil {
			c.abort(fmt.Errorf("tunnel: the port's connection: %w", err), true)
			_ = pc.Close()
			break
		}
	}
	wg.Wait()
	close(pumped)
	<-watched
	_ = pc.Close()
	_ = c.Close()
}
