package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// portKey names one published port.
type portKey struct {
	id   string
	port int
}

// ctxKey carries a request's portKey to the transport.
type ctxKey struct{}

// pools holds one http.Transport per sandbox port (bounded: past max, the
// least recently used transport's idle connections are closed and it is
// dropped) and every connection dialled to a sandbox, by port, so that a
// port's connections can be closed at once and idle ones found.
type pools struct {
	g   *Service
	max int

	mu    sync.Mutex
	trs   map[portKey]*poolEntry
	conns map[portKey]map[*trackedConn]struct{}
	// gen counts each port's closes: a connection dialled before a close
	// is closed at once rather than kept.
	gen map[portKey]uint64
}

type poolEntry struct {
	tr      *http.Transport
	lastUse time.Time
}

func newPools(g *Service, max int) *pools {
	return &pools{g: g, max: max, trs: map[portKey]*poolEntry{}, conns: map[portKey]map[*trackedConn]struct{}{},
		gen: map[portKey]uint64{}}
}

// RoundTrip sends a request on its port's transport.
func (p *pools) RoundTrip(r *http.Request) (*http.Response, error) {
	k, ok := r.Context().Value(ctxKey{}).(portKey)
	if !ok {
		return nil, errors.New("gateway: request without a port")
	}
	return p.transport(k).RoundTrip(r)
}

func (p *pools) transport(k portKey) *http.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.trs[k]; ok {
		e.lastUse = time.Now()
		return e.tr
	}
	if len(p.trs) >= p.max {
		var oldK portKey
		var old *poolEntry
		for kk, e := range p.trs {
			if old == nil || e.lastUse.Before(old.lastUse) {
				oldK, old = kk, e
			}
		}
		old.tr.CloseIdleConnections()
		delete(p.trs, oldK)
	}
	lim := p.g.cfg.Limits
	tr := &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return p.dial(ctx, k) },
		ForceAttemptHTTP2:      false,
		MaxIdleConnsPerHost:    lim.MaxIdleConnsPerPort,
		MaxConnsPerHost:        lim.MaxConnsPerPort,
		IdleConnTimeout:        min(lim.IdleTimeout, 90*time.Second),
		ResponseHeaderTimeout:  lim.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: int64(lim.MaxHeaderBytes) * 2,
		DisableCompression:     true,
	}
	p.trs[k] = &poolEntry{tr: tr, lastUse: time.Now()}
	return tr
}

// dial opens a connection to a port through the dialer, with the record
// the registry holds now.
func (p *pools) dial(ctx context.Context, k portKey) (net.Conn, error) {
	sb, ok := p.g.reg.get(k.id)
	if !ok {
		return nil, fmt.Errorf("gateway: sandbox left the registry: %w", events.ErrSandboxGone)
	}
	p.mu.Lock()
	gen := p.gen[k]
	p.mu.Unlock()
	c, err := p.g.cfg.Dialer.Dial(ctx, sb, k.port)
	if err != nil {
		return nil, err
	}
	in, out := p.g.metrics.byteCounters(k.id, k.port)
	tc := &trackedConn{Conn: c, p: p, k: k, in: in, out: out}
	tc.touch()
	p.mu.Lock()
	if p.gen[k] != gen {
		p.mu.Unlock()
		_ = c.Close()
		return nil, fmt.Errorf("gateway: port closed while dialling: %w", events.ErrPortNotExposed)
	}
	set := p.conns[k]
	if set == nil {
		set = map[*trackedConn]struct{}{}
		p.conns[k] = set
	}
	set[tc] = struct{}{}
	p.mu.Unlock()
	return tc, nil
}

// closePort closes every connection to a port and drops its transport:
// the port was unpublished, its token or access changed, or its sandbox
// stopped running.
func (p *pools) closePort(k portKey) int {
	p.mu.Lock()
	p.gen[k]++
	set := p.conns[k]
	delete(p.conns, k)
	e := p.trs[k]
	delete(p.trs, k)
	p.mu.Unlock()
	if e != nil {
		e.tr.CloseIdleConnections()
	}
	for c := range set {
		_ = c.closeOnce()
	}
	return len(set)
}

// forgetPort drops a port's generation (its sandbox is gone).
func (p *pools) forgetPort(k portKey) {
	p.mu.Lock()
	delete(p.gen, k)
	p.mu.Unlock()
}

func (p *pools) remove(tc *trackedConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if set := p.conns[tc.k]; set != nil {
		delete(set, tc)
		if len(set) == 0 {
			delete(p.conns, tc.k)
		}
	}
}

// closeIdle closes the connections without a byte either way for longer
// than idle; it returns how many.
func (p *pools) closeIdle(idle time.Duration) int {
	cut := time.Now().Add(-idle).UnixNano()
	var stale []*trackedConn
	p.mu.Lock()
	for _, set := range p.conns {
		for c := range set {
			if c.last.Load() < cut {
				stale = append(stale, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		_ = c.closeOnce()
	}
	return len(stale)
}

// count returns how many connections are open to a port (for tests).
func (p *pools) count(k portKey) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns[k])
}

// closeAll closes every connection (at shutdown).
func (p *pools) closeAll() {
	p.mu.Lock()
	var keys []portKey
	for k := range p.conns {
		keys = append(keys, k)
	}
	for k := range p.trs {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		p.closePort(k)
	}
}

// trackedConn is a connection to a sandbox's port: it counts its bytes
// and the time of its last one.
type trackedConn struct {
	net.Conn
	p       *pools
	k       portKey
	in, out prometheus.Counter
	last    atomic.Int64 // unix nanoseconds of the last byte
	once    sync.Once
	err     error
}

func (c *trackedConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.out.Add(float64(n))
		c.touch()
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.in.Add(float64(n))
		c.touch()
	}
	return n, err
}

func (c *trackedConn) Close() error { return c.closeOnce() }

func (c *trackedConn) closeOnce() error {
	c.once.Do(func() {
		c.err = c.Conn.Close()
		c.p.remove(c)
	})
	return c.err
}

// limiter counts requests in flight per port and per tenant.
type limiter struct {
	perPort, perTenant int

	mu      sync.Mutex
	ports   map[portKey]int
	tenants map[string]int
}

func newLimiter(perPort, perTenant int) *limiter {
	return &limiter{perPort: perPort, perTenant: perTenant, ports: map[portKey]int{}, tenants: map[string]int{}}
}

// acquire takes a slot of k and of tenant; which names the bound that
// refused ("port" or "tenant"), or is "" with a release func.
func (l *limiter) acquire(k portKey, tenant string) (release func(), which string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ports[k] >= l.perPort {
		return nil, "port"
	}
	if l.tenants[tenant] >= l.perTenant {
		return nil, "tenant"
	}
	l.ports[k]++
	l.tenants[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.ports[k]--; l.ports[k] <= 0 {
				delete(l.ports, k)
			}
			if l.tenants[tenant]--; l.tenants[tenant] <= 0 {
				delete(l.tenants, tenant)
			}
		})
	}, ""
}
