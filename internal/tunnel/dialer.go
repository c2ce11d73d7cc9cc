package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

var randRead = rand.Read

// Defaults of both sides.
const (
	DefaultOpenTimeout = 5 * time.Second
	DefaultKeepAlive   = time.Second
	DefaultDeadAfter   = 4 * time.Second
	DefaultIdleTimeout = 10 * time.Minute
)

// DialerConfig configures a gateway's Dialer. Zero values take the
// defaults.
type DialerConfig struct {
	Log *slog.Logger
	// SigningSeed is the gateway's nkey seed (SU…): every open is signed
	// with it (internal/recsign), and workers with trusted command signers
	// run only opens signed by a key whose command scope allows
	// events.OpPortsOpen. Empty: opens are unsigned (open deployments).
	SigningSeed []byte
	// OpenTimeout bounds an open's answer (SBX_E1602 WorkerTimeout past it).
	OpenTimeout time.Duration
	// Window is what a worker may send on a connection before the gateway
	// reads it (DefaultWindow).
	Window int
	// KeepAlive is how often an idle end says it is alive; DeadAfter ends a
	// connection from whose other end nothing came for that long.
	KeepAlive time.Duration
	DeadAfter time.Duration
	// IdleTimeout ends a connection that carried no bytes either way for
	// that long; negative: never.
	IdleTimeout time.Duration
}

func (c *DialerConfig) defaults() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.OpenTimeout <= 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = DefaultDeadAfter
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
}

// Dialer opens connections to sandboxes' published ports for a gateway.
// It is safe for concurrent use.
type Dialer struct {
	nc  *nats.Conn
	cfg DialerConfig
	id  string
	key *recsign.Key
	log *slog.Logger

	conns *table
	sub   *nats.Subscription

	mu      sync.Mutex
	opening map[string]chan openAnswer
	closed  bool

	stop chan struct{}
	wg   sync.WaitGroup
}

type openAnswer struct {
	accept *events.TunnelAccept
	err    error
}

// NewDialer subscribes the gateway's connection subjects
// (sbx.tun.gw.<random id>.*) on nc and starts the keepalive.
func NewDialer(nc *nats.Conn, cfg DialerConfig) (*Dialer, error) {
	if nc == nil {
		return nil, errors.New("tunnel: a NATS connection is required")
	}
	cfg.defaults()
	if cfg.Window < MinWindow || cfg.Window > MaxWindow {
		return nil, fmt.Errorf("tunnel: Window %d is outside %d..%d", cfg.Window, MinWindow, MaxWindow)
	}
	d := &Dialer{nc: nc, cfg: cfg, id: newID(), log: cfg.Log.With("service", "tunnel-dialer"), conns: newTable(DefaultGrowBudget),
		opening: make(map[string]chan openAnswer), stop: make(chan struct{})}
	if len(cfg.SigningSeed) > 0 {
		k, err := recsign.NewKey(cfg.SigningSeed)
		if err != nil {
			return nil, fmt.Errorf("tunnel: SigningSeed: %w", err)
		}
		d.key = k
	}
	sub, err := nc.Subscribe(events.TunnelGatewaySubject(d.id, "*"), d.onMsg)
	if err != nil {
		return nil, fmt.Errorf("tunnel: subscribe: %w", err)
	}
	// Each connection holds at most its window: the subscription's own
	// queue only has to absorb a burst of the callback's latency.
	_ = sub.SetPendingLimits(1<<20, 1<<30)
	d.sub = sub
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.conns.keepalive(d.stop, cfg.KeepAlive, cfg.DeadAfter, cfg.IdleTimeout)
	}()
	return d, nil
}

// onMsg takes a message for one of the gateway's connections: an open's
// answer (or the server's no-responders status), or a frame.
func (d *Dialer) onMsg(m *nats.Msg) {
	i := len(m.Subject) - 1
	for i >= 0 && m.Subject[i] != '.' {
		i--
	}
	id := m.Subject[i+1:]
	d.mu.Lock()
	ch := d.opening[id]
	if ch != nil {
		delete(d.opening, id)
	}
	d.mu.Unlock()
	if ch == nil {
		if c := d.conns.get(id); c != nil {
			c.handle(m.Data)
		}
		return
	}
	var a openAnswer
	switch {
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		a.err = events.Errorf(events.CodeWorkerTimeout, "no worker takes the sandbox's connections (it stopped or restarts)")
	case len(m.Data) > 0 && m.Data[0] == frameAccept:
		var acc events.TunnelAccept
		if err := json.Unmarshal(m.Data[1:], &acc); err != nil || !events.ValidTunnelID(acc.Conn) || acc.Window < MinWindow || acc.Window > MaxWindow {
			a.err = events.Errorf(events.CodeBackendError, "the worker's answer to an open is malformed")
		} else {
			a.accept = &acc
			// Before the next message (a frame of this connection) is
			// handled: the connection takes frames from now on.
			if c := d.conns.get(id); c != nil {
				c.mu.Lock()
				c.credit = acc.Window
				c.mu.Unlock()
			}
		}
	case len(m.Data) > 0 && m.Data[0] == frameRefuse:
		if e := events.DecodeError(m.Data[1:]); e != nil {
			a.err = e
		} else {
			a.err = events.Errorf(events.CodeBackendError, "the worker refused the connection without a reason")
		}
	default:
		a.err = events.Errorf(events.CodeBackendError, "the worker's answer to an open is malformed")
	}
	ch <- a // buffered
}

// Dial connects to port of the sandbox sb (its registry record: Backend,
// Worker, SandboxID, Tenant, Ports). Errors wrap events sentinels:
// ErrPortNotExposed (also for a record that is not a sandbox's, or a port
// it does not publish; the worker checks again against the registry),
// ErrPortUnreachable (nothing listens), ErrSandboxGone, ErrCapabilityNotSupported,
// ErrWorkerTimeout (no worker answered). The connection's life is not
// bound by ctx, only the open.
func (d *Dialer) Dial(ctx context.Context, sb events.Sandbox, port int) (net.Conn, error) {
	notExposed := func() error {
		return events.Errorf(events.CodePortNotExposed, "port %d is not published", port).With("port", port)
	}
	if !events.ValidID(sb.SandboxID) || !events.ValidID(sb.Backend) || !events.ValidID(sb.Worker) || port < events.MinPort || port > events.MaxPort {
		return nil, notExposed()
	}
	if !slices.ContainsFunc(sb.Ports, func(p events.PortExposure) bool { return p.Port == port }) {
		return nil, notExposed()
	}
	switch sb.State {
	case events.StateGone, events.StateLost:
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s has ended", sb.SandboxID)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, net.ErrClosed
	}
	id := newID()
	ch := make(chan openAnswer, 1)
	d.opening[id] = ch
	d.mu.Unlock()
	reply := events.TunnelGatewaySubject(d.id, id)
	c := newConn(d.nc, d.conns, id, d.cfg.Window, Addr{Name: "gateway"},
		Addr{Name: sb.SandboxID + ":" + strconv.Itoa(port)})
	d.conns.add(c)
	fail := func(err error) (net.Conn, error) {
		d.mu.Lock()
		delete(d.opening, id)
		d.mu.Unlock()
		// An accept that came as the open gave up: the worker's end is
		// told, not left to its dead bound.
		select {
		case a := <-ch:
			if a.accept != nil {
				peer := events.TunnelWorkerConnSubject(sb.Backend, sb.Worker, a.accept.Conn)
				c.peer.Store(&peer)
				_ = c.Close()
			}
		default:
		}
		d.conns.remove(c)
		return nil, err
	}
	data, _ := json.Marshal(events.TunnelOpen{SandboxID: sb.SandboxID, Port: port, Tenant: sb.Tenant, Conn: id, Reply: reply, Window: d.cfg.Window})
	m := nats.NewMsg(events.TunnelOpenSubject(sb.Backend, sb.Worker))
	m.Reply = reply
	m.Data = data
	m.Header.Set(events.HeaderCEID, id)
	m.Header.Set(events.HeaderNotAfter, events.FormatNotAfter(time.Now().Add(d.cfg.OpenTimeout)))
	if d.key != nil {
		if err := d.key.Sign(m); err != nil {
			return fail(fmt.Errorf("tunnel: sign the open: %w", err))
		}
	}
	if err := d.nc.PublishMsg(m); err != nil {
		return fail(events.Errorf(events.CodeBackendUnavailable, "tunnel: publish the open: %v", err))
	}
	t := time.NewTimer(d.cfg.OpenTimeout)
	defer t.Stop()
	select {
	case a := <-ch:
		if a.err != nil {
			return fail(a.err)
		}
		peer := events.TunnelWorkerConnSubject(sb.Backend, sb.Worker, a.accept.Conn)
		c.lastRecv.Store(time.Now().UnixNano())
		c.peer.Store(&peer)
		return c, nil
	case <-t.C:
		return fail(events.Errorf(events.CodeWorkerTimeout, "the worker of sandbox %s did not answer within %s", sb.SandboxID, d.cfg.OpenTimeout))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// Conns is how many connections the dialer carries.
func (d *Dialer) Conns() int { return d.conns.len() }

// Close ends every connection (their Reads and Writes return
// net.ErrClosed), unsubscribes and stops the keepalive.
func (d *Dialer) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	err := d.sub.Unsubscribe()
	close(d.stop)
	d.wg.Wait()
	for _, c := range d.conns.all() {
		c.finish(net.ErrClosed, net.ErrClosed, nil, true)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("tunnel: unsubscribe: %w", err)
	}
	return nil
}
