package interpreter

import (
	"bytes"
	"context"
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

	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envd"
)

// Port is the code interpreter's port inside the sandbox.
const Port = 49999

// Config configures a Client for one sandbox.
type Config struct {
	// BaseURL is e2bapi.Config.PortURL(49999, id, domain) (or E2B_SANDBOX_URL).
	BaseURL   string
	SandboxID string
	// AccessToken (envdAccessToken) is sent as X-Access-Token on /execute.
	AccessToken string
	// TrafficAccessToken is sent as E2B-Traffic-Access-Token when set.
	TrafficAccessToken string
	HTTPClient         *http.Client
	Logger             *slog.Logger
	UserAgent          string
}

// Client talks to one sandbox's code interpreter.
type Client struct {
	cfg  Config
	base string
	http *http.Client
	log  *slog.Logger
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.SandboxID == "" {
		return nil, errors.New("interpreter: base url and sandbox id are required")
	}
	if _, err := url.Parse(cfg.BaseURL); err != nil {
		return nil, fmt.Errorf("interpreter: bad base url: %w", err)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sandboxio-interpreter/1"
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
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), http: hc, log: lg}, nil
}

// Error is a non-2xx answer of the code interpreter (plain-text body).
type Error struct {
	Op      string
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("interpreter %s: %d: %s", e.Op, e.Status, e.Message)
}

// Is maps statuses onto envd's sentinels: 404 → ErrNotFound, 400/422 →
// ErrInvalidArgument, 401/403 → ErrUnauthenticated, 502 → ErrSandboxGone.
func (e *Error) Is(target error) bool {
	switch target {
	case envd.ErrNotFound:
		return e.Status == http.StatusNotFound
	case envd.ErrInvalidArgument:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity
	case envd.ErrUnauthenticated:
		return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
	case envd.ErrSandboxGone:
		return e.Status == http.StatusBadGateway
	case envd.ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

// Result is one rich result of an execution.
type Result struct {
	Text, HTML, Markdown, SVG, PNG, JPEG, PDF, LaTeX, JavaScript string
	JSON, Data, Chart, Extra                                     map[string]any
	// IsMainResult is true for the cell's value, false for display() output.
	IsMainResult bool
}

// ExecutionError is the error raised by the executed code.
type ExecutionError struct {
	Name, Value, Traceback string
}

// Execution is the collected outcome of Execute.
type Execution struct {
	Results        []Result
	Stdout, Stderr []string
	// Error is set when the code raised (this is not a Go error).
	Error          *ExecutionError
	ExecutionCount int
}

// ExecuteOptions are optional callbacks and per-execution env vars.
type ExecuteOptions struct {
	EnvVars  map[string]string
	OnStdout func(text string)
	OnStderr func(text string)
	OnResult func(Result)
	// StallTimeout, when positive, bounds the silence of the answer (the
	// server sends a keepalive every 5 s): a stream silent for longer is cut
	// and classified like one that ended early (ErrSandboxGone or
	// ErrStreamBroken). Zero waits as long as ctx allows.
	StallTimeout time.Duration
}

// idleReader resets a timer on every read that returns data.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.d)
	}
	return n, err
}

func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set(envd.HeaderSandboxID, c.cfg.SandboxID)
	req.Header.Set(envd.HeaderSandboxPort, strconv.Itoa(Port))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if c.cfg.TrafficAccessToken != "" {
		req.Header.Set("E2B-Traffic-Access-Token", c.cfg.TrafficAccessToken)
	}
	return req, nil
}

func readError(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(raw))
	var proxy struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &proxy) == nil && proxy.Message != "" {
		msg = proxy.Message
	}
	return &Error{Op: op, Status: resp.StatusCode, Message: msg}
}

// Execute runs code in a context: contextID when set, else the default
// context of language ("python" when empty). Sending both is rejected by the
// server. A stream that ends without end_of_execution gives an error matching
// envd.ErrStreamBroken.
func (c *Client) Execute(ctx context.Context, code, language, contextID string, opts ...ExecuteOptions) (*Execution, error) {
	var o ExecuteOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	body := map[string]any{"code": code}
	if contextID != "" {
		body["context_id"] = contextID
	}
	if language != "" {
		body["language"] = language
	}
	if len(o.EnvVars) > 0 {
		body["env_vars"] = o.EnvVars
	}
	rctx := ctx
	var stalled *time.Timer
	if o.StallTimeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stalled = time.AfterFunc(o.StallTimeout, cancel)
		defer stalled.Stop()
	}
	req, err := c.newRequest(rctx, http.MethodPost, "/execute", body)
	if err != nil {
		return nil, fmt.Errorf("interpreter execute: %w", err)
	}
	if c.cfg.AccessToken != "" {
		req.Header.Set(envd.HeaderAccessToken, c.cfg.AccessToken)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interpreter execute: %w", ctx.Err())
		}
		if rctx.Err() != nil {
			return nil, c.broken(ctx, fmt.Errorf("no answer for %s", o.StallTimeout))
		}
		return nil, fmt.Errorf("interpreter execute: %w: %w", envd.ErrSandboxGone, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError("execute", resp)
	}
	ex := &Execution{}
	var src io.Reader = resp.Body
	if stalled != nil {
		stalled.Reset(o.StallTimeout)
		src = &idleReader{r: resp.Body, timer: stalled, d: o.StallTimeout}
	}
	dec := NewDecoder(src)
	for {
		m, err := dec.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ex, fmt.Errorf("interpreter execute: %w", ctx.Err())
			}
			return ex, c.broken(ctx, err)
		}
		switch m.Type {
		case "stdout":
			ex.Stdout = append(ex.Stdout, m.Text)
			if o.OnStdout != nil {
				o.OnStdout(m.Text)
			}
		case "stderr":
			ex.Stderr = append(ex.Stderr, m.Text)
			if o.OnStderr != nil {
				o.OnStderr(m.Text)
			}
		case "result":
			r := Result{Text: m.Text, HTML: m.HTML, Markdown: m.Markdown, SVG: m.SVG, PNG: m.PNG, JPEG: m.JPEG, PDF: m.PDF,
				LaTeX: m.LaTeX, JavaScript: m.JavaScript, JSON: m.JSON, Data: m.Data, Chart: m.Chart, Extra: m.Extra, IsMainResult: m.IsMainResult}
			ex.Results = append(ex.Results, r)
			if o.OnResult != nil {
				o.OnResult(r)
			}
		case "error":
			ex.Error = &ExecutionError{Name: m.Name, Value: m.Value, Traceback: m.Traceback}
		case "number_of_executions":
			ex.ExecutionCount = m.ExecutionCount
		case "end_of_execution":
			return ex, nil
		}
	}
}

// Context is a code-interpreter context (a kernel).
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (c *Client) doJSON(ctx context.Context, op, method, path string, in, out any) error {
	req, err := c.newRequest(ctx, method, path, in)
	if err != nil {
		return fmt.Errorf("interpreter %s: %w", op, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("interpreter %s: %w: %w", op, envd.ErrSandboxGone, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(op, resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("interpreter %s: decode: %w", op, err)
		}
	}
	return nil
}

// CreateContext creates a context for language in cwd ("" = server defaults).
func (c *Client) CreateContext(ctx context.Context, language, cwd string) (Context, error) {
	body := map[string]string{}
	if language != "" {
		body["language"] = language
	}
	if cwd != "" {
		body["cwd"] = cwd
	}
	var out Context
	err := c.doJSON(ctx, "create_context", http.MethodPost, "/contexts", body, &out)
	return out, err
}

// ListContexts lists the contexts.
func (c *Client) ListContexts(ctx context.Context) ([]Context, error) {
	var out []Context
	err := c.doJSON(ctx, "list_contexts", http.MethodGet, "/contexts", nil, &out)
	return out, err
}

// RestartContext restarts a context's kernel (its state is lost).
func (c *Client) RestartContext(ctx context.Context, id string) error {
	return c.doJSON(ctx, "restart_context", http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil)
}

// DeleteContext deletes a context.
func (c *Client) DeleteContext(ctx context.Context, id string) error {
	return c.doJSON(ctx, "delete_context", http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil)
}

// Health probes GET /health: nil when healthy, an error matching
// envd.ErrSandboxGone on 502 or when unreachable.
func (c *Client) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, "/health", nil)
	if err != nil {
		return fmt.Errorf("interpreter health: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("interpreter health: %w: %w", envd.ErrSandboxGone, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError("health", resp)
	}
	return nil
}

// broken classifies an /execute stream that ended early.
func (c *Client) broken(ctx context.Context, cause error) error {
	if herr := c.Health(context.WithoutCancel(ctx)); errors.Is(herr, envd.ErrSandboxGone) {
		return fmt.Errorf("interpreter execute: %w: %w", envd.ErrSandboxGone, cause)
	}
	return fmt.Errorf("interpreter execute: %w: %w", envd.ErrStreamBroken, cause)
}
