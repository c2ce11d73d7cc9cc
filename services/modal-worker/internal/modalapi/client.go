package modalapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
)

// What the client tells the server about itself: the Go SDK's values
// (CLIENT_TYPE_LIBMODAL_GO, "behaves like Python SDK 1.0.0").
const (
	ClientType      = "9"
	ClientVersion   = "1.0.0"
	LibraryVersion  = "sandboxio-modal/0.1.0"
	methodAuthToken = "/modal.client.ModalClient/AuthTokenGet"
)

// ErrNoCredentials: MODAL_TOKEN_ID or MODAL_TOKEN_SECRET is missing.
var ErrNoCredentials = errors.New("modal token id or secret not set")

// Client is a connection to Modal's control plane. Create it with New; it
// is safe for concurrent use.
type Client struct {
	cfg   Config
	log   *slog.Logger
	conn  *grpc.ClientConn
	api   pb.ModalClientClient
	local bool // the server URL is localhost (router connections are plaintext)

	tokens tokenSource
}

// New dials the control plane (lazily: no network I/O happens here).
func New(cfg Config) (*Client, error) {
	if cfg.TokenID == "" || cfg.TokenSecret == "" {
		return nil, fmt.Errorf("modalapi: %w (%s, %s or the profile file)", ErrNoCredentials, EnvTokenID, EnvTokenSecret)
	}
	if cfg.ServerURL == "" {
		cfg.ServerURL = DefaultServerURL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("modalapi: invalid server URL %q", cfg.ServerURL)
	}
	var creds credentials.TransportCredentials
	port := u.Port()
	switch u.Scheme {
	case "https":
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		if port == "" {
			port = "443"
		}
	case "http":
		creds = insecure.NewCredentials()
		if port == "" {
			port = "80"
		}
	default:
		return nil, fmt.Errorf("modalapi: invalid server URL %q: want https:// or http://", cfg.ServerURL)
	}
	c := &Client{cfg: cfg, log: cfg.Logger, local: IsLocalhost(u)}
	c.tokens.fetch = c.fetchAuthToken
	conn, err := grpc.NewClient(hostPort(u.Hostname(), port), append(dialOptions(creds),
		grpc.WithChainUnaryInterceptor(c.unaryInterceptor),
		grpc.WithChainStreamInterceptor(c.streamInterceptor))...)
	if err != nil {
		return nil, fmt.Errorf("modalapi: dial %s: %w", cfg.ServerURL, err)
	}
	c.conn = conn
	c.api = pb.NewModalClientClient(conn)
	return c, nil
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// dialOptions are the SDKs' channel settings: 100 MiB messages, 64 MiB
// windows, a keepalive ping every 30 s.
func dialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100<<20), grpc.MaxCallSendMsgSize(100<<20)),
		grpc.WithInitialWindowSize(64 << 20), grpc.WithInitialConnWindowSize(64 << 20),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// CheckAuth fetches an auth token (AuthTokenGet), which fails with
// UNAUTHENTICATED when Modal rejects the token; it creates nothing.
func (c *Client) CheckAuth(ctx context.Context) error {
	_, err := c.tokens.get(ctx)
	return err
}

// API is the generated control-plane client, with headers, auth token and
// retries applied by interceptors.
func (c *Client) API() pb.ModalClientClient { return c.api }

// Config returns the client's configuration.
func (c *Client) Config() Config { return c.cfg }

// Local reports whether the control plane is on localhost.
func (c *Client) Local() bool { return c.local }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// staticHeaders go on every control-plane call, unary and streaming.
func (c *Client) staticHeaders() []string {
	return []string{
		"x-modal-client-type", ClientType,
		"x-modal-client-version", ClientVersion,
		"x-modal-libmodal-version", LibraryVersion,
		"x-modal-token-id", c.cfg.TokenID,
		"x-modal-token-secret", c.cfg.TokenSecret,
	}
}

func (c *Client) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, c.staticHeaders()...), desc, cc, method, opts...)
}

// Retry policy of the SDKs for unary calls.
const (
	maxRetries     = 3
	baseRetryDelay = 100 * time.Millisecond
	maxRetryDelay  = time.Second
	minThrottle    = 100 * time.Millisecond
)

// Retryable reports the codes the SDKs retry.
func Retryable(c codes.Code) bool {
	switch c {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// RetryAfter returns the server-directed delay of an error carrying an
// RPCRetryPolicy in its status details.
func RetryAfter(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if p, ok := d.(*pb.RPCRetryPolicy); ok {
			return max(time.Duration(float64(p.GetRetryAfterSecs())*float64(time.Second)), minThrottle), true
		}
	}
	return 0, false
}

// ThrottledError is returned when the server asked to retry later than the
// call's context or MaxThrottleWait allows.
type ThrottledError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("throttled by the server (retry after %s): %v", e.RetryAfter, e.Err)
}
func (e *ThrottledError) Unwrap() error { return e.Err }

// unaryInterceptor adds the headers and the auth token, and retries: the
// SDKs' 3 retries (100 ms doubling, capped at 1 s) on transient codes, and
// server-directed retries that do not use up that budget. Every attempt of
// one call carries the same x-idempotency-key.
func (c *Client) unaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	key := NewUUID()
	start := time.Now()
	attempt, throttled := 0, 0
	var waited time.Duration
	delay := baseRetryDelay
	reauthed := false
	for {
		md := append(c.staticHeaders(), "x-idempotency-key", key,
			"x-retry-attempt", strconv.Itoa(attempt), "x-throttle-retry-attempt", strconv.Itoa(throttled))
		if attempt > 0 {
			md = append(md, "x-retry-delay", fmt.Sprintf("%.3f", time.Since(start).Seconds()))
		}
		if throttled > 0 {
			md = append(md, "x-throttle-retry-delay", fmt.Sprintf("%.3f", time.Since(start).Seconds()))
		}
		if method != methodAuthToken {
			tok, err := c.tokens.get(ctx)
			if err != nil {
				return err
			}
			md = append(md, "x-modal-auth-token", tok)
		}
		err := invoker(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, opts...)
		if err == nil || ctx.Err() != nil {
			return err
		}
		code := status.Code(err)
		if ra, ok := RetryAfter(err); ok && c.cfg.MaxThrottleWait >= 0 {
			if dl, ok := ctx.Deadline(); (ok && time.Until(dl) < ra) || (c.cfg.MaxThrottleWait > 0 && waited+ra > c.cfg.MaxThrottleWait) {
				return &ThrottledError{RetryAfter: ra, Err: err}
			}
			c.log.Debug("modal throttled a call", "method", method, "retry_after", ra)
			if !sleep(ctx, ra) {
				return err
			}
			waited += ra
			throttled++
			continue
		}
		if code == codes.Unauthenticated && method != methodAuthToken && !reauthed {
			// The auth token may have been revoked early: fetch a new one once.
			reauthed = true
			c.tokens.invalidate()
			continue
		}
		if !Retryable(code) || attempt >= maxRetries {
			return err
		}
		if !sleep(ctx, delay) {
			return err
		}
		delay = min(2*delay, maxRetryDelay)
		attempt++
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fetchAuthToken calls AuthTokenGet (through the interceptor, which leaves
// out x-modal-auth-token for it).
func (c *Client) fetchAuthToken(ctx context.Context) (string, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := c.api.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("modalapi: AuthTokenGet: %w", err)
	}
	tok := resp.GetToken()
	if tok == "" {
		return "", time.Time{}, errors.New("modalapi: did not receive auth token from server")
	}
	exp, ok := JWTExpiry(tok)
	if !ok {
		exp = time.Now().Add(20 * time.Minute)
	}
	return tok, exp, nil
}

// tokenSource caches a token and refreshes it at half its lifetime; one
// fetch at a time, never under the lock.
type tokenSource struct {
	fetch func(ctx context.Context) (string, time.Time, error)

	mu        sync.Mutex
	tok       string
	exp       time.Time
	refreshAt time.Time
	inflight  chan struct{}
	lastErr   error
}

func (t *tokenSource) invalidate() {
	t.mu.Lock()
	t.refreshAt = time.Time{}
	t.exp = time.Time{}
	t.mu.Unlock()
}

func (t *tokenSource) get(ctx context.Context) (string, error) {
	waited := false
	for {
		t.mu.Lock()
		now := time.Now()
		if t.tok != "" && now.Before(t.refreshAt) {
			tok := t.tok
			t.mu.Unlock()
			return tok, nil
		}
		if ch := t.inflight; ch != nil {
			t.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			waited = true
			continue
		}
		if waited && t.lastErr != nil {
			err := t.lastErr
			t.mu.Unlock()
			return "", err
		}
		ch := make(chan struct{})
		t.inflight = ch
		t.mu.Unlock()

		tok, exp, err := t.fetch(ctx)

		t.mu.Lock()
		t.inflight = nil
		t.lastErr = err
		if err == nil {
			t.tok, t.exp = tok, exp
			t.refreshAt = now.Add(time.Until(exp) / 2)
		}
		stale, staleExp := t.tok, t.exp
		close(ch)
		t.mu.Unlock()
		if err != nil {
			if stale != "" && time.Now().Before(staleExp) {
				return stale, nil // still valid: refresh failures only matter once it expires
			}
			return "", err
		}
		return tok, nil
	}
}

// JWTExpiry decodes the exp claim of a JWT without checking its signature.
func JWTExpiry(tok string) (time.Time, bool) {
	claims, err := JWTClaims(tok)
	if err != nil {
		return time.Time{}, false
	}
	exp, ok := claims["exp"].(float64)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0), true
}

// JWTClaims decodes a JWT's payload: three dot-separated parts whose middle
// one is base64url JSON (the Go SDK refuses anything else).
func JWTClaims(tok string) (map[string]any, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT: want three dot-separated parts")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil, fmt.Errorf("JWT payload: %w", err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return nil, fmt.Errorf("JWT payload: %w", err)
	}
	if exp, ok := claims["exp"]; ok {
		if f, ok := exp.(float64); !ok || f != float64(int64(f)) {
			return nil, errors.New("JWT exp claim is not an integer")
		}
	}
	return claims, nil
}

// NewUUID returns a random UUIDv4.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
