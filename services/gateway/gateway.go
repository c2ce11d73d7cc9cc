package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/net/netutil"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// PortDialer opens a connection to a TCP port inside a sandbox: for a
// deployment internal/tunnel's Dialer (over NATS, through the worker that
// owns the sandbox). Its errors wrap events.ErrPortNotExposed,
// ErrPortUnreachable, ErrSandboxGone, ErrCapabilityNotSupported or
// ErrWorkerTimeout.
type PortDialer interface {
	Dial(ctx context.Context, sb events.Sandbox, port int) (net.Conn, error)
}

// Limits bound what the gateway carries. Zero fields take the defaults
// (DefaultLimits).
type Limits struct {
	// MaxConnsPerPort and MaxConnsPerTenant bound the requests (an
	// upgraded connection counts until it closes) in flight to one
	// sandbox port and to all of one tenant's sandboxes; past them 429.
	MaxConnsPerPort   int
	MaxConnsPerTenant int
	// MaxIdleConnsPerPort bounds the kept-alive connections to a port.
	MaxIdleConnsPerPort int
	// MaxRequestBody bounds a request's body (413 past it).
	MaxRequestBody int64
	// MaxHeaderBytes bounds a request's header (431 past it); a response's
	// header may be twice that.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the client's sending of a request header;
	// ClientIdleTimeout a kept-alive client connection between requests.
	ReadHeaderTimeout time.Duration
	ClientIdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the sandbox's answer's header (504).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes a connection to a sandbox (a quiet upgraded one,
	// or a response that stalls) with no byte either way for that long.
	IdleTimeout time.Duration
	// MaxDuration bounds one request, its streamed response, or one
	// upgraded connection, from start to end.
	MaxDuration time.Duration
	// MaxTransports bounds the per-port transports kept.
	MaxTransports int
	// MaxClientConns bounds the client connections each listener holds
	// open at once, whatever their tenant: past it, new connections wait
	// in the listen backlog until one closes. With the per-connection
	// buffers (a tunnel window and a copy buffer) it bounds the gateway's
	// memory.
	MaxClientConns int
}

// DefaultLimits are the bounds of a zero Limits.
var DefaultLimits = Limits{
	MaxConnsPerPort:       1024,
	MaxConnsPerTenant:     4096,
	MaxIdleConnsPerPort:   64,
	MaxRequestBody:        64 << 20,
	MaxHeaderBytes:        32 << 10,
	ReadHeaderTimeout:     10 * time.Second,
	ClientIdleTimeout:     2 * time.Minute,
	ResponseHeaderTimeout: 60 * time.Second,
	IdleTimeout:           5 * time.Minute,
	MaxDuration:           time.Hour,
	MaxTransports:         4096,
	MaxClientConns:        8192,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	return Limits{
		MaxConnsPerPort:       cmp.Or(l.MaxConnsPerPort, d.MaxConnsPerPort),
		MaxConnsPerTenant:     cmp.Or(l.MaxConnsPerTenant, d.MaxConnsPerTenant),
		MaxIdleConnsPerPort:   cmp.Or(l.MaxIdleConnsPerPort, d.MaxIdleConnsPerPort),
		MaxRequestBody:        cmp.Or(l.MaxRequestBody, d.MaxRequestBody),
		MaxHeaderBytes:        cmp.Or(l.MaxHeaderBytes, d.MaxHeaderBytes),
		ReadHeaderTimeout:     cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout),
		ClientIdleTimeout:     cmp.Or(l.ClientIdleTimeout, d.ClientIdleTimeout),
		ResponseHeaderTimeout: cmp.Or(l.ResponseHeaderTimeout, d.ResponseHeaderTimeout),
		IdleTimeout:           cmp.Or(l.IdleTimeout, d.IdleTimeout),
		MaxDuration:           cmp.Or(l.MaxDuration, d.MaxDuration),
		MaxTransports:         cmp.Or(l.MaxTransports, d.MaxTransports),
		MaxClientConns:        cmp.Or(l.MaxClientConns, d.MaxClientConns),
	}
}

// copyBuffer is the size of a proxy copy buffer: a large download costs
// one read and one write system call per buffer (`sandboxio bench port`:
// with 32 KiB, 0.39 of a direct download's rate on a loaded 2-core host;
// with 256 KiB, 0.44–0.73).
const copyBuffer = 256 << 10

// DefaultCookieTTL is the life of the cookie a signed link is traded for.
const DefaultCookieTTL = 8 * time.Hour

// Config configures a gateway.
type Config struct {
	// Listen is the address of the HTTP listener, e.g. 127.0.0.1:8480
	// (port 0 picks one; Addr says which).
	Listen string
	// Domain enables host routing: <port>-<sandbox_id>.<Domain>. Empty:
	// path routing only.
	Domain string
	// TLSCertFile and TLSKeyFile serve HTTPS instead of HTTP (HTTP/1.1).
	TLSCertFile, TLSKeyFile string
	// PublicHTTPS says clients reach the gateway over HTTPS through a
	// terminator in front of it: cookies are Secure and
	// X-Forwarded-Proto is https.
	PublicHTTPS bool
	// Dialer carries connections to sandboxes' ports.
	Dialer PortDialer
	Limits Limits
	// CookieTTL is the life of a link's cookie (default DefaultCookieTTL,
	// at most events.MaxPortLinkTTL).
	CookieTTL time.Duration
	// PortLinkKey checks signed links and keys the cookies they are traded
	// for (internal/portauth.KeySize bytes, the routers' key). Empty: a
	// private port takes the token header only. Never logged.
	PortLinkKey []byte
	// E2BListen and E2B serve another handler (the E2B-compatible API) on
	// a listener of its own; both or neither.
	E2BListen string
	E2B       http.Handler
	Logger    *slog.Logger
}

// Service is a gateway.
type Service struct {
	cfg      Config
	log      *slog.Logger
	js       jetstream.JetStream
	reg      *registry
	pools    *pools
	limits   *limiter
	metrics  *metrics
	proxy    *httputil.ReverseProxy
	tokenLog rateLog

	ln, e2bLn net.Listener
}

// New checks cfg and opens the listeners; Run serves them.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if cfg.Dialer == nil {
		return nil, errors.New("gateway: no dialer")
	}
	if (cfg.E2BListen == "") != (cfg.E2B == nil) {
		return nil, errors.New("gateway: E2BListen and E2B go together")
	}
	if len(cfg.PortLinkKey) != 0 && len(cfg.PortLinkKey) != portauth.KeySize {
		return nil, fmt.Errorf("gateway: a port link key has %d bytes, not %d", len(cfg.PortLinkKey), portauth.KeySize)
	}
	cfg.Domain = strings.Trim(strings.ToLower(cfg.Domain), ".")
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.CookieTTL = min(cmp.Or(cfg.CookieTTL, DefaultCookieTTL), events.MaxPortLinkTTL)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("service", "gateway")
	g := &Service{cfg: cfg, log: log, metrics: newMetrics(), tokenLog: rateLog{perSecond: 20},
		limits: newLimiter(cfg.Limits.MaxConnsPerPort, cfg.Limits.MaxConnsPerTenant)}
	if nc != nil {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.js = js
	}
	g.reg = newRegistry(log, g.registryChanged)
	g.pools = newPools(g, cfg.Limits.MaxTransports)
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      g.pools,
		ModifyResponse: modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		BufferPool:     newBufferPool(),
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("gateway: listen %s: %w", cfg.Listen, err)
		}
		g.ln = netutil.LimitListener(ln, cfg.Limits.withDefaults().MaxClientConns)
	}
	if cfg.E2BListen != "" {
		ln, err := net.Listen("tcp", cfg.E2BListen)
		if err != nil {
			g.closeListeners()
			return nil, fmt.Errorf("gateway: listen %s: %w", cfg.E2BListen, err)
		}
		g.e2bLn = netutil.LimitListener(ln, cfg.Limits.withDefaults().MaxClientConns)
	}
	return g, nil
}

func (g *Service) closeListeners() {
	for _, ln := range []net.Listener{g.ln, g.e2bLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// Addr is the listener's address (nil without Listen).
func (g *Service) Addr() net.Addr {
	if g.ln == nil {
		return nil
	}
	return g.ln.Addr()
}

// E2BAddr is the E2B listener's address (nil without E2BListen).
func (g *Service) E2BAddr() net.Addr {
	if g.e2bLn == nil {
		return nil
	}
	return g.e2bLn.Addr()
}

// Handler is the gateway's HTTP handler (what Run serves on Listen).
func (g *Service) Handler() http.Handler { return http.HandlerFunc(g.serve) }

// MetricsHandler serves the gateway's Prometheus metrics.
func (g *Service) MetricsHandler() http.Handler { return g.metrics.handler() }

// Run watches the registry and serves the listeners until ctx ends, then
// closes every connection it carries.
func (g *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if g.js != nil {
		wg.Add(1)
		go func() { defer wg.Done(); g.reg.run(ctx, g.js) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); g.janitor(ctx) }()

	errc := make(chan error, 2)
	var servers []*http.Server
	serve := func(ln net.Listener, h http.Handler, tlsOn bool) {
		lim := g.cfg.Limits
		srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, IdleTimeout: lim.ClientIdleTimeout,
			MaxHeaderBytes: lim.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if tlsOn {
				err = srv.ServeTLS(ln, g.cfg.TLSCertFile, g.cfg.TLSKeyFile)
			} else {
				err = srv.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if g.ln != nil {
		serve(g.ln, g.Handler(), g.cfg.TLSCertFile != "")
		g.log.Info("gateway listening", "addr", g.ln.Addr().String(), "domain", g.cfg.Domain)
	}
	if g.e2bLn != nil {
		serve(g.e2bLn, g.cfg.E2B, false)
		g.log.Info("e2b api listening", "addr", g.e2bLn.Addr().String())
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("gateway: serve: %w", err)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	for _, s := range servers {
		if s.Shutdown(sctx) != nil {
			_ = s.Close()
		}
	}
	g.pools.closeAll()
	for _, s := range servers {
		_ = s.Close() // hijacked (upgraded) connections end with their sandbox side
	}
	return err
}

// janitor closes idle connections to sandboxes until ctx ends.
func (g *Service) janitor(ctx context.Context) {
	every := min(max(g.cfg.Limits.IdleTimeout/4, 50*time.Millisecond), 10*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := g.pools.closeIdle(g.cfg.Limits.IdleTimeout); n > 0 {
				g.log.Debug("idle sandbox connections closed", "count", n)
			}
		}
	}
}

// registryChanged closes a port's connections when it stops being served
// as it was: unpublished, its access or token changed, or its sandbox no
// longer running.
func (g *Service) registryChanged(id string, old, cur *events.Sandbox) {
	if old == nil {
		return
	}
	for _, p := range old.Ports {
		k := portKey{id: id, port: p.Port}
		keep := cur != nil && cur.State == events.StateRunning && old.State == events.StateRunning
		if keep {
			np, ok := exposure(*cur, p.Port)
			keep = ok && np.Access == p.Access && np.TokenHash == p.TokenHash
		}
		if !keep {
			if n := g.pools.closePort(k); n > 0 {
				g.log.Info("port connections closed", "sandbox_id", id, "port", p.Port, "count", n)
			}
		}
		if cur == nil {
			g.pools.forgetPort(k)
		}
	}
	if cur == nil {
		g.metrics.forget(id)
	}
}

// serve is the gateway's handler.
func (g *Service) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || r.Method == http.MethodTrace {
		// Not proxied: CONNECT would make the sandbox's port a tunnel,
		// TRACE echo the request's credentials.
		writeError(w, http.StatusMethodNotAllowed, events.Errorf(events.CodeInvalidRequest, "%s is not served", r.Method))
		return
	}
	t, ok := g.route(w, r)
	if !ok {
		return
	}
	if g.js != nil && !g.reg.loaded() {
		writeError(w, http.StatusServiceUnavailable, events.Errorf(events.CodeBackendUnavailable, "the gateway is loading the sandbox registry; retry"))
		return
	}
	sb, ok := g.reg.get(t.sandboxID)
	if !ok {
		g.notFound(w)
		return
	}
	exp, published := exposure(sb, t.port)
	switch {
	case !published:
		g.notFound(w)
		return
	case sb.State == events.StatePaused:
		// A published port of a paused sandbox: it exists, and says so
		// only to whom may reach it.
		if exp.Access != events.PortPublic && !g.authorize(w, r, t, exp) {
			return
		}
		g.metrics.request(t.sandboxID, t.port, http.StatusConflict)
		writeError(w, http.StatusConflict, pausedError())
		return
	case sb.State != events.StateRunning:
		g.notFound(w)
		return
	}
	switch exp.Access {
	case events.PortPublic:
	case events.PortPrivate:
		if !g.authorize(w, r, t, exp) {
			return
		}
	default: // an access this gateway does not know: refuse
		g.notFound(w)
		return
	}
	k := portKey{id: t.sandboxID, port: t.port}
	release, which := g.limits.acquire(k, cmp.Or(sb.Tenant, events.TenantOpen))
	if release == nil {
		g.metrics.request(t.sandboxID, t.port, http.StatusTooManyRequests)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, events.Errorf(events.CodeRateLimited,
			"too many requests in flight to this %s", which).With("limit", which))
		return
	}
	defer release()
	if r.ContentLength > g.cfg.Limits.MaxRequestBody {
		g.metrics.request(t.sandboxID, t.port, http.StatusRequestEntityTooLarge)
		writeError(w, http.StatusRequestEntityTooLarge, events.Errorf(events.CodePayloadTooLarge,
			"the request body is larger than %d bytes", g.cfg.Limits.MaxRequestBody))
		return
	}
	g.metrics.inflight.Inc()
	defer g.metrics.inflight.Dec()
	rec := &statusWriter{ResponseWriter: w}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(rec, r.Body, g.cfg.Limits.MaxRequestBody)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), ctxKey{}, k), g.cfg.Limits.MaxDuration)
	defer cancel()
	ctx = context.WithValue(ctx, targetKey{}, t)
	g.proxy.ServeHTTP(rec, r.WithContext(ctx))
	status := rec.status
	if status == 0 && r.Header.Get("Upgrade") != "" {
		status = http.StatusSwitchingProtocols
	}
	g.metrics.request(t.sandboxID, t.port, cmp.Or(status, http.StatusOK))
}

// targetKey carries a request's target to rewrite.
type targetKey struct{}

// route finds the target of a request; when there is none it has answered
// (404, or the redirect of a bare path prefix).
func (g *Service) route(w http.ResponseWriter, r *http.Request) (target, bool) {
	if t, ok := hostTarget(r.Host, g.cfg.Domain); ok {
		t.path, t.rawPath = r.URL.Path, r.URL.RawPath
		return t, true
	}
	if isSandboxHost(r.Host, g.cfg.Domain) {
		g.notFound(w)
		return target{}, false
	}
	t, slash, ok := pathTarget(r.URL.EscapedPath())
	if !ok {
		g.notFound(w)
		return target{}, false
	}
	if !slash {
		loc := t.prefix + "/"
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, loc, http.StatusPermanentRedirect)
		return target{}, false
	}
	return t, true
}

func (g *Service) notFound(w http.ResponseWriter) {
	g.metrics.unrouted.Inc()
	writeNotFound(w)
}

// rewrite makes the request a sandbox receives: the path without a
// path route's prefix, the query without the link parameter, no
// credential of the gateway's, no client forwarding header, and the
// gateway's own X-Forwarded-For/Proto/Host.
func (g *Service) rewrite(pr *httputil.ProxyRequest) {
	t, _ := pr.In.Context().Value(targetKey{}).(target)
	out := pr.Out
	out.URL.Scheme = "http"
	out.URL.Host = "127.0.0.1:" + strconv.Itoa(t.port)
	out.URL.Path, out.URL.RawPath = t.path, t.rawPath
	out.URL.RawQuery, _ = withoutParam(pr.In.URL.RawQuery, portauth.LinkParam)
	out.Host = pr.In.Host
	stripCredentials(out.Header)
	for k := range out.Header {
		if strings.HasPrefix(k, "X-Forwarded-") {
			delete(out.Header, k)
		}
	}
	out.Header.Del("Forwarded")
	out.Header.Del("X-Real-Ip")
	out.Header.Del("Via")
	pr.SetXForwarded()
	if g.https(pr.In) {
		out.Header.Set("X-Forwarded-Proto", "https")
	}
	if t.prefix != "" {
		out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
}

// proxyError answers a request the sandbox could not.
func (g *Service) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, events.Errorf(events.CodePayloadTooLarge,
			"the request body is larger than %d bytes", mbe.Limit))
	case errors.Is(err, events.ErrPortNotExposed), errors.Is(err, events.ErrSandboxGone), errors.Is(err, events.ErrPortReserved):
		// A port the worker reserves is one it never serves: not published.
		writeNotFound(w)
	case errors.Is(err, events.ErrPortUnreachable):
		writeError(w, http.StatusBadGateway, events.Errorf(events.CodePortUnreachable,
			"nothing in the sandbox accepts connections on this port"))
	case errors.Is(err, events.ErrCapabilityNotSupported):
		writeError(w, http.StatusBadGateway, events.Errorf(events.CodeCapabilityNotSupp,
			"the sandbox's backend cannot carry connections to its ports"))
	case errors.Is(err, events.ErrWorkerTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		writeError(w, http.StatusGatewayTimeout, events.Errorf(events.CodeWorkerTimeout,
			"the sandbox's port did not answer in time"))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away: nobody to answer.
		w.WriteHeader(499)
	default:
		g.log.Debug("sandbox port request failed", slog.Any("err", err))
		writeError(w, http.StatusBadGateway, events.Errorf(events.CodeBackendUnavailable,
			"the connection to the sandbox's port failed"))
	}
}

// statusWriter records the status of a response; Unwrap keeps flushing
// and hijacking (http.ResponseController) working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 || s.status < 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
	// A response of unknown length (server-sent events, a stream) has
	// its header sent at once, not with its first bytes.
	if code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified && s.Header().Get("Content-Length") == "" {
		_ = http.NewResponseController(s.ResponseWriter).Flush()
	}
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush is there for ReverseProxy's own check of a flusher.
func (s *statusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// clientIP is the client's address without its port.
func clientIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// bufferPool gives ReverseProxy its copy buffers (copyBuffer bytes).
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }
