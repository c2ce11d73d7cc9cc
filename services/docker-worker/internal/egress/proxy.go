package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Proxy bounds.
const (
	peekTimeout  = 10 * time.Second // for the first bytes (SNI, Host, CONNECT)
	peekLimit    = 16 << 10         // bytes read before a decision
	dialTimeout  = 10 * time.Second
	maxProxyConn = 256 // per sandbox
)

// proxy takes every TCP connection of one allowlist sandbox that is not to
// a listed CIDR (the host's nat rule redirects them here), finds the name
// it is for (TLS SNI, HTTP Host, HTTP CONNECT) and relays it only when that
// name is listed — to the addresses our own lookup of the name gives, never
// to the address the sandbox chose, and never to an address it may not
// reach. A connection with no name is judged by its destination address.
type proxy struct {
	ln     net.Listener
	policy Policy
	never  []netip.Prefix
	up     upstream
	stats  *Stats
	names  *nameGuard
	log    *slog.Logger
	sem    chan struct{}

	cancel  context.CancelFunc // ends serve's context: stop
	wg      sync.WaitGroup
	mu      sync.Mutex
	stopped bool // under mu: no connection is tracked any more
	conns   map[net.Conn]struct{}
}

func startProxy(gw netip.Addr, p Policy, never []netip.Prefix, up upstream, stats *Stats, names *nameGuard, log *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		return nil, fmt.Errorf("egress: proxy listen on %s: %w", gw, err)
	}
	// The proxy's own lifetime, not its caller's: it serves until stop.
	ctx, cancel := context.WithCancel(context.Background())
	px := &proxy{ln: ln, policy: p, never: never, up: up, stats: stats, names: names, log: log,
		sem: make(chan struct{}, maxProxyConn), cancel: cancel, conns: make(map[net.Conn]struct{})}
	px.wg.Add(1)
	go px.serve(ctx)
	return px, nil
}

func (px *proxy) port() uint16 { return uint16(px.ln.Addr().(*net.TCPAddr).Port) }

// stop closes the listener and every relayed connection and waits for them.
func (px *proxy) stop() {
	px.cancel()
	_ = px.ln.Close()
	px.mu.Lock()
	px.stopped = true
	for c := range px.conns {
		_ = c.Close()
	}
	px.mu.Unlock()
	px.wg.Wait()
}

func (px *proxy) serve(ctx context.Context) {
	defer px.wg.Done()
	for {
		c, err := px.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
				continue
			}
		}
		select {
		case px.sem <- struct{}{}:
		default:
			px.stats.ConnsRefused.Add(1)
			reset(c)
			continue
		}
		if !px.track(c, true) {
			<-px.sem
			continue
		}
		px.wg.Add(1)
		go func() {
			defer px.wg.Done()
			defer func() { <-px.sem }()
			defer px.track(c, false)
			px.handle(ctx, c)
		}()
	}
}

func (px *proxy) track(c net.Conn, add bool) bool {
	px.mu.Lock()
	defer px.mu.Unlock()
	if !add {
		delete(px.conns, c)
		_ = c.Close()
		return true
	}
	if px.stopped {
		_ = c.Close()
		return false
	}
	px.conns[c] = struct{}{}
	return true
}

func (px *proxy) handle(ctx context.Context, c net.Conn) {
	orig, err := originalDst(c)
	if err != nil {
		orig = netip.AddrPortFrom(netip.Addr{}, 0)
	}
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	var rec bytes.Buffer
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(c, peekLimit), &rec), 4096)
	h := sniff(br)
	_ = c.SetReadDeadline(time.Time{})

	up, why := px.dial(ctx, h, orig)
	if up == nil {
		px.stats.ConnsRefused.Add(1)
		px.log.Debug("egress refused", "name", truncate(h.name), "dst", orig.String(), "why", why)
		switch {
		case h.http:
			_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: "+
				strconv.Itoa(len(why)+1)+"\r\n\r\n"+why+"\n")
		default:
			reset(c)
		}
		return
	}
	px.stats.ConnsAllowed.Add(1)
	px.track(up, true)
	defer px.track(up, false)
	if h.connect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		// What the client sent after the request head goes on.
		consumed := rec.Len() - br.Buffered()
		if _, err := up.Write(rec.Bytes()[consumed:]); err != nil {
			return
		}
	} else if _, err := up.Write(rec.Bytes()); err != nil {
		return
	}
	relay(c, up)
}

// dial decides and connects; why says what refused it.
func (px *proxy) dial(ctx context.Context, h hello, orig netip.AddrPort) (net.Conn, string) {
	port := orig.Port()
	if h.port != 0 {
		port = h.port
	}
	if port == 0 {
		return nil, "no destination port"
	}
	if h.name != "" {
		if ip, err := netip.ParseAddr(h.name); err == nil {
			return px.dialIP(ctx, ip, port)
		}
		if !px.policy.MatchName(h.name) {
			return nil, "name not on the allowlist"
		}
		if name, _ := NormaliseName(h.name); !px.names.allow(px.policy, name) {
			px.stats.NamesCapped.Add(1)
			return nil, "too many or too long names under a wildcard"
		}
		ctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		ips, err := px.up.lookup4(ctx, h.name)
		if err != nil {
			return nil, "name does not resolve"
		}
		for _, ip := range ips {
			if !ipAllowed(ip, px.policy, px.never) {
				px.stats.DNSRebind.Add(1)
				continue
			}
			if c, err := px.connect(ctx, ip, port); err == nil {
				return c, ""
			}
		}
		return nil, "no reachable address for the name"
	}
	if h.connect {
		return nil, "bad CONNECT target"
	}
	if !orig.IsValid() || !orig.Addr().IsValid() {
		return nil, "no name and no original destination"
	}
	return px.dialIP(ctx, orig.Addr(), port)
}

// dialIP relays to an address only when a listed CIDR covers it.
func (px *proxy) dialIP(ctx context.Context, ip netip.Addr, port uint16) (net.Conn, string) {
	ip = ip.Unmap()
	if !px.policy.Listed(ip) || !ipAllowed(ip, px.policy, px.never) {
		return nil, "address not on the allowlist"
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := px.connect(ctx, ip, port)
	if err != nil {
		return nil, "connect failed"
	}
	return c, ""
}

func (px *proxy) connect(ctx context.Context, ip netip.Addr, port uint16) (net.Conn, error) {
	d := net.Dialer{
		// The last word before connect(): an address the policy refuses is
		// never dialled, whatever decided to dial it.
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ipAllowed(ap.Addr(), px.policy, px.never) {
				return fmt.Errorf("egress: refusing to dial %s", address)
			}
			return nil
		},
	}
	return d.DialContext(ctx, "tcp4", netip.AddrPortFrom(ip, port).String())
}

// relay copies both ways until both directions end; a half-close is passed
// on so request/response protocols finish.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(b, a)
	go cp(a, b)
	wg.Wait()
}

// reset closes c with an RST, so that a refused connection does not look
// like one the server closed politely.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
