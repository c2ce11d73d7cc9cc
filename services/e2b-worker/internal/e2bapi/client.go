package e2bapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	defaultMaxRetries = 3
	defaultBaseDelay  = 500 * time.Millisecond
	defaultMaxDelay   = 10 * time.Second
	maxErrorBody      = 64 << 10
	maxResponseBody   = 16 << 20
)

// Client talks to the E2B control plane. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
	http *http.Client
	log  *slog.Logger
}

// New returns a Client. It fails when the API key is empty.
func New(cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("e2bapi: %s is not set", EnvAPIKey)
	}
	if _, err := url.Parse(cfg.APIBaseURL()); err != nil {
		return nil, fmt.Errorf("e2bapi: bad api url: %w", err)
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = defaultMaxRetries
	}
	if cfg.RetryBaseDelay <= 0 {
		cfg.RetryBaseDelay = defaultBaseDelay
	}
	if cfg.RetryMaxDelay <= 0 {
		cfg.RetryMaxDelay = defaultMaxDelay
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sandboxio-e2bapi/1"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, base: cfg.APIBaseURL(), http: hc, log: lg}, nil
}

// Config returns the client's configuration (including the key: do not log
// it with %v of its fields; Config itself formats safely).
func (c *Client) Config() Config { return c.cfg }

func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Create creates a sandbox (POST /sandboxes, 201).
func (c *Client) Create(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	if req.TemplateID == "" {
		return nil, fmt.Errorf("e2bapi: create: template id is required")
	}
	body := newSandbox{
		TemplateID:          req.TemplateID,
		Timeout:             seconds(req.Timeout),
		Metadata:            req.Metadata,
		EnvVars:             req.EnvVars,
		AutoPause:           req.AutoPause,
		Secure:              boolOr(req.Secure, true),
		AllowInternetAccess: boolOr(req.AllowInternetAccess, true),
		Network:             req.Network,
	}
	var sb Sandbox
	if _, _, err := c.do(ctx, "create", http.MethodPost, "/sandboxes", nil, body, &sb, http.StatusCreated); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Get returns one sandbox (GET /sandboxes/{id}).
func (c *Client) Get(ctx context.Context, sandboxID string) (*SandboxDetail, error) {
	var d SandboxDetail
	if _, _, err := c.do(ctx, "get", http.MethodGet, "/sandboxes/"+url.PathEscape(sandboxID), nil, nil, &d, http.StatusOK); err != nil {
		return nil, err
	}
	return &d, nil
}

// List returns one page of sandboxes (GET /v2/sandboxes).
func (c *Client) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	q := url.Values{}
	if len(opts.Metadata) > 0 {
		q.Set("metadata", EncodeMetadataFilter(opts.Metadata))
	}
	if len(opts.States) > 0 {
		q.Set("state", strings.Join(opts.States, ","))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.NextToken != "" {
		q.Set("nextToken", opts.NextToken)
	}
	var out []SandboxDetail
	_, hdr, err := c.do(ctx, "list", http.MethodGet, "/v2/sandboxes", q, nil, &out, http.StatusOK)
	if err != nil {
		return ListPage{}, err
	}
	return ListPage{Sandboxes: out, NextToken: hdr.Get("X-Next-Token")}, nil
}

// ListAll follows X-Next-Token until the last page.
func (c *Client) ListAll(ctx context.Context, opts ListOptions) ([]SandboxDetail, error) {
	var all []SandboxDetail
	for {
		page, err := c.List(ctx, opts)
		if err != nil {
			return all, err
		}
		all = append(all, page.Sandboxes...)
		if page.NextToken == "" {
			return all, nil
		}
		opts.NextToken = page.NextToken
	}
}

// Kill kills a sandbox (DELETE /sandboxes/{id}). It reports false, nil when the
// sandbox was already gone (404), as the SDKs do.
func (c *Client) Kill(ctx context.Context, sandboxID string) (bool, error) {
	_, _, err := c.do(ctx, "kill", http.MethodDelete, "/sandboxes/"+url.PathEscape(sandboxID), nil, nil, nil, http.StatusNoContent)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// SetTimeout sets the sandbox to end timeout from now (it can shorten it).
func (c *Client) SetTimeout(ctx context.Context, sandboxID string, timeout time.Duration) error {
	body := map[string]int64{"timeout": seconds(timeout)}
	_, _, err := c.do(ctx, "set_timeout", http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/timeout", nil, body, nil, http.StatusNoContent)
	return err
}

// Connect connects to a running sandbox or resumes a paused one, extending
// (never shortening) its lifetime to at least timeout from now. resumed is
// true when the API answered 201 (the sandbox was paused).
func (c *Client) Connect(ctx context.Context, sandboxID string, timeout time.Duration) (sb *Sandbox, resumed bool, err error) {
	body := map[string]int64{"timeout": seconds(timeout)}
	var out Sandbox
	status, _, err := c.do(ctx, "connect", http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/connect", nil, body, &out, http.StatusOK, http.StatusCreated)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// Pause pauses a sandbox with its memory. It reports false, nil when the
// sandbox was already paused (409), as the SDKs do.
func (c *Client) Pause(ctx context.Context, sandboxID string) (bool, error) {
	_, _, err := c.do(ctx, "pause", http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/pause", nil, map[string]bool{"memory": true}, nil, http.StatusNoContent)
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// EncodeMetadataFilter encodes a metadata filter as the JS SDK does: each key
// and value URI-component-escaped, joined as k=v&k2=v2 (keys sorted). The
// result becomes the value of the single "metadata" query parameter and so
// is escaped once more on the wire.
func EncodeMetadataFilter(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, encodeURIComponent(k)+"="+encodeURIComponent(md[k]))
	}
	return strings.Join(parts, "&")
}

// encodeURIComponent escapes like JavaScript's encodeURIComponent.
func encodeURIComponent(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("-_.!~*'()", ch) >= 0 {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

// do runs one API call with the 429 retry policy. It decodes a success body
// into out (when non-nil) and returns the status and headers.
func (c *Client) do(ctx context.Context, op, method, path string, q url.Values, in, out any, okStatus ...int) (int, http.Header, error) {
	var payload []byte
	if in != nil {
		var err error
		if payload, err = json.Marshal(in); err != nil {
			return 0, nil, fmt.Errorf("e2bapi: %s: encode request: %w", op, err)
		}
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	for attempt := 0; ; attempt++ {
		status, hdr, err := c.once(ctx, op, method, u, payload, out, okStatus)
		var apiErr *APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || attempt >= c.cfg.MaxRetries || c.cfg.MaxRetries < 0 {
			return status, hdr, err
		}
		delay := c.backoff(attempt, apiErr.RetryAfter)
		c.log.DebugContext(ctx, "e2b api rate limited, retrying", slog.String("op", op), slog.Int("attempt", attempt+1), slog.Duration("delay", delay))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, hdr, fmt.Errorf("%w (gave up waiting to retry: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.cfg.RetryBaseDelay << attempt
	if retryAfter > 0 {
		d = retryAfter
	}
	if d > c.cfg.RetryMaxDelay || d <= 0 {
		d = c.cfg.RetryMaxDelay
	}
	return d
}

func (c *Client) once(ctx context.Context, op, method, u string, payload []byte, out any, okStatus []int) (int, http.Header, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, nil, fmt.Errorf("e2bapi: %s: %w", op, err)
	}
	req.Header.Set("X-API-Key", c.cfg.APIKey)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("e2bapi: %s: %w", op, err)
	}
	defer resp.Body.Close()
	for _, s := range okStatus {
		if resp.StatusCode != s {
			continue
		}
		if out != nil {
			if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBody)).Decode(out); err != nil {
				return resp.StatusCode, resp.Header, fmt.Errorf("e2bapi: %s: decode response: %w", op, err)
			}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
		return resp.StatusCode, resp.Header, nil
	}
	return resp.StatusCode, resp.Header, readAPIError(op, resp)
}

func readAPIError(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Op: op, StatusCode: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var b ErrorBody
	if json.Unmarshal(raw, &b) == nil && (b.Message != "" || b.Code != 0) {
		e.Code, e.Message, e.ErrorCode = b.Code, b.Message, b.ErrorCode
	} else {
		e.Message = strings.TrimSpace(string(raw))
	}
	return e
}

// parseRetryAfter parses delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
