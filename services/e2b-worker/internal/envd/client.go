package envd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/connectjson"
	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem/filesystemconnect"
	"github.com/sandboxio/sandboxio/internal/envdpb/process/processconnect"
)

// Port is envd's port inside a sandbox.
const Port = 49983

// Header names of the E2B data plane.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
	HeaderAccessToken = "X-Access-Token"
	HeaderKeepalive   = "Keepalive-Ping-Interval"
	HeaderTimeout     = "Connect-Timeout-Ms"
)

// DefaultKeepaliveInterval is what the SDKs send as Keepalive-Ping-Interval.
const DefaultKeepaliveInterval = 50 * time.Second

// Config configures a Client for one sandbox.
type Config struct {
	// BaseURL of envd: e2bapi.Config.EnvdURL (or E2B_SANDBOX_URL).
	BaseURL string
	// SandboxID goes into E2b-Sandbox-Id.
	SandboxID string
	// Port goes into E2b-Sandbox-Port (default 49983).
	Port int
	// AccessToken is the sandbox's envdAccessToken; sent as X-Access-Token.
	AccessToken string
	// User runs processes and owns files ("" = envd's default user).
	User string
	// HTTPClient must speak HTTP/1.1 or HTTP/2 and should not add
	// Accept-Encoding on its own; nil means a client with compression disabled.
	// It must not have an overall Timeout shorter than the longest stream.
	HTTPClient *http.Client
	// Logger receives debug logs; discarded when nil.
	Logger *slog.Logger
	// UserAgent is sent as User-Agent.
	UserAgent string
	// KeepaliveInterval is sent as Keepalive-Ping-Interval on streams (whole
	// seconds, at least 1 s; default 50 s). Run treats a stream silent for
	// longer than this plus StallGrace as stalled.
	KeepaliveInterval time.Duration
	// StallGrace is added to KeepaliveInterval to detect stalls (default 5 s).
	StallGrace time.Duration
	// HealthTimeout bounds the /health probe that classifies broken streams
	// (default 5 s).
	HealthTimeout time.Duration
}

// Client talks to one sandbox's envd. It is safe for concurrent use.
type Client struct {
	cfg     Config
	base    string
	http    *http.Client
	log     *slog.Logger
	process processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("envd: base url is required")
	}
	if _, err := url.Parse(cfg.BaseURL); err != nil {
		return nil, fmt.Errorf("envd: bad base url: %w", err)
	}
	if cfg.SandboxID == "" {
		return nil, errors.New("envd: sandbox id is required")
	}
	if cfg.Port == 0 {
		cfg.Port = Port
	}
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.KeepaliveInterval < time.Second {
		cfg.KeepaliveInterval = time.Second // envd crashes on 0; the header is whole seconds
	}
	if cfg.StallGrace <= 0 {
		cfg.StallGrace = 5 * time.Second
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 5 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sandboxio-envd/1"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		hc = &http.Client{Transport: tr}
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), http: hc, log: lg}
	opts := append(connectjson.ClientOptions(), connect.WithInterceptors(headerInterceptor{c}))
	c.process = processconnect.NewProcessClient(hc, c.base, opts...)
	c.fs = filesystemconnect.NewFilesystemClient(hc, c.base, opts...)
	return c, nil
}

// SandboxID returns the sandbox this client talks to.
func (c *Client) SandboxID() string { return c.cfg.SandboxID }

// setCommon sets the headers of every envd request.
func (c *Client) setCommon(h http.Header, withUser bool) {
	h.Set(HeaderSandboxID, c.cfg.SandboxID)
	h.Set(HeaderSandboxPort, strconv.Itoa(c.cfg.Port))
	if c.cfg.AccessToken != "" {
		h.Set(HeaderAccessToken, c.cfg.AccessToken)
	}
	if withUser && c.cfg.User != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.cfg.User+":")))
	}
	h.Set("User-Agent", c.cfg.UserAgent)
}

type headerInterceptor struct{ c *Client }

func (i headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		i.c.setCommon(req.Header(), true)
		return next(ctx, req)
	}
}

func (i headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		i.c.setCommon(conn.RequestHeader(), true)
		return conn
	}
}

func (i headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Health probes GET /health. It returns nil when envd answers 2xx, an error
// matching ErrSandboxGone on 502 or when envd is unreachable, and *Error
// otherwise.
func (c *Client) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/health", nil)
	if err != nil {
		return fmt.Errorf("envd health: %w", err)
	}
	c.setCommon(req.Header, false)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("envd health: %w", err)
		}
		return fmt.Errorf("envd health: %w: %w", ErrSandboxGone, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil
	}
	herr := readHTTPError("health", resp)
	if resp.StatusCode == http.StatusBadGateway {
		return fmt.Errorf("%w: %w", ErrSandboxGone, herr)
	}
	return herr
}

// classify turns a failed call into ErrSandboxGone when the sandbox is gone.
// It is used for errors that may be caused by a dead sandbox (unavailable,
// unknown, transport errors).
func (c *Client) classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var e *Error
	if errors.As(err, &e) && e.Code != connect.CodeUnavailable && e.Code != connect.CodeUnknown {
		return err
	}
	herr := c.Health(context.WithoutCancel(ctx))
	if errors.Is(herr, ErrSandboxGone) {
		return fmt.Errorf("%w: %w", ErrSandboxGone, err)
	}
	return err
}

// httpErrorBody is envd's HTTP-API error body ({"code":<int>,"message":...});
// the proxy's 502 body has the same two fields plus sandboxId.
type httpErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func readHTTPError(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(raw))
	var b httpErrorBody
	if json.Unmarshal(raw, &b) == nil && b.Message != "" {
		msg = b.Message
	}
	return &Error{Op: op, Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: msg}
}
