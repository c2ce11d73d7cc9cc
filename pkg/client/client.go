package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/internal/natstrace"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// DefaultURL is used when SBX_NATS_URL is not set.
const DefaultURL = "nats://127.0.0.1:4222"

// Client talks to a sandboxio deployment over NATS.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	ownsNC  bool
	grace   time.Duration
	timeout time.Duration
	// idleCheck is how long a stream may be silent before the client checks
	// that its sandbox and worker are still there.
	idleCheck time.Duration
	owner     string
	// tenant is the caller's tenant token as the server knows it
	// (events.TenantOpen on an open deployment).
	tenant string
	log    *slog.Logger
}

// Option configures a Client.
type Option func(*Client)

// WithTeardownGrace sets how long a cancelled call may take to kill its
// remote work; default SBX_TEARDOWN_GRACE or 5 s.
func WithTeardownGrace(d time.Duration) Option { return func(c *Client) { c.grace = d } }

// WithLogger sets where orphaned-sandbox warnings go; default stderr.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithRequestTimeout bounds calls whose context has no deadline; default 2 min.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithOwner stamps created sandboxes with an owner.
func WithOwner(owner string) Option { return func(c *Client) { c.owner = owner } }

// New wraps an existing connection; Close leaves it open.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{nc: nc, js: js, grace: teardownGraceFromEnv(), timeout: 2 * time.Minute, idleCheck: 5 * time.Second}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c, nil
}

// Connect dials url (empty: SBX_NATS_URL, else DefaultURL).
func Connect(url string, opts ...Option) (*Client, error) {
	if url == "" {
		url = os.Getenv("SBX_NATS_URL")
	}
	if url == "" {
		url = DefaultURL
	}
	nc, err := nats.Connect(url, nats.Name("sandboxio-client"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("client: connect %s: %w", url, err)
	}
	c, err := New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownsNC = true
	return c, nil
}

// Close closes the connection if Connect opened it.
func (c *Client) Close() {
	if c.ownsNC {
		c.nc.Close()
	}
}

// Conn is the underlying connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

func teardownGraceFromEnv() time.Duration {
	v := os.Getenv("SBX_TEARDOWN_GRACE")
	if v == "" {
		return 5 * time.Second
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 5 * time.Second
}

// call sends one request and decodes the reply into out.
func (c *Client) call(ctx context.Context, op string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("client: encode %s: %w", op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	msg := nats.NewMsg(events.APISubject(op))
	msg.Data = data
	if trace.SpanContextFromContext(ctx).IsValid() {
		// The caller's span: the router's and worker's spans join its trace.
		natstrace.Inject(ctx, msg.Header)
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
			return context.Canceled
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			return context.DeadlineExceeded
		case errors.Is(err, nats.ErrNoResponders):
			return events.Errorf(events.CodeBackendUnavailable, "no sandboxio router answers on %s", msg.Subject)
		}
		return events.Errorf(events.CodeBackendUnavailable, "%s: %v", op, err)
	}
	if code := resp.Header.Get(events.HeaderServiceErrorCode); code != "" {
		if e := events.DecodeError(resp.Data); e != nil {
			return e
		}
		n, _ := strconv.Atoi(code)
		return events.Errorf(events.CodeFromNumber(n), "%s", resp.Header.Get(events.HeaderServiceError))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return events.Errorf(events.CodeInternal, "decode %s reply: %v", op, err)
	}
	return nil
}

// Create creates a sandbox. If ctx is cancelled the sandbox, if it was
// created meanwhile, is killed within the teardown grace.
func (c *Client) Create(ctx context.Context, req events.CreateRequest) (*events.CreateReply, error) {
	return c.CreateWatch(ctx, req, nil)
}

// CreateWatch is Create that also passes the worker's progress messages (an
// image being pulled...) to progress while the create runs.
func (c *Client) CreateWatch(ctx context.Context, req events.CreateRequest, progress func(msg string)) (*events.CreateReply, error) {
	if req.SandboxID == "" {
		req.SandboxID = events.NewID() // known before the reply, so a cancelled create can be undone
	}
	if progress != nil && events.ValidID(req.SandboxID) {
		sub, err := c.nc.Subscribe(events.ProgressSubject(c.tenantToken(), req.SandboxID), func(m *nats.Msg) { progress(string(m.Data)) })
		if err == nil {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	if req.Owner == "" {
		req.Owner = c.owner
	}
	var out events.CreateReply
	err := c.call(ctx, events.OpCreate, req, &out)
	if ctx.Err() != nil {
		c.teardown(req.SandboxID)
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// teardown kills a sandbox whose create or use was abandoned, within the
// grace, retrying while the create may still be queued.
func (c *Client) teardown(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	for {
		_, err := c.Kill(ctx, id)
		if err == nil {
			return
		}
		retry := errors.Is(err, events.ErrSandboxNotFound) || errors.Is(err, events.ErrWorkerTimeout) || errors.Is(err, events.ErrBackendUnavailable)
		if !retry || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // back-off while the create may still be queued
		}
	}
	c.log.Warn("orphaned sandbox: kill not confirmed within the teardown grace; its lifetime and the reaper will remove it",
		"sandbox_id", id, "grace", c.grace)
}

// Exec runs a command to completion and returns its buffered output. A
// timeout gives events.ErrExecutionTimeout with the partial result. When
// ctx has no deadline the call waits for timeout_ms plus a margin, or the
// client's request timeout (WithRequestTimeout, default 2 min) when there
// is no timeout_ms: use Stream for long processes. Whenever the call gives
// up — ctx cancelled or a deadline passed — the remote process is killed
// within the teardown grace, and ctx's error is returned.
func (c *Client) Exec(ctx context.Context, req events.ExecRequest) (*events.ExecResult, error) {
	req.Stream = false
	if req.ProcessID == "" {
		req.ProcessID = events.NewID()
	}
	cctx, cancel := c.execContext(ctx, req.TimeoutMS)
	defer cancel()
	var out events.ExecResult
	err := c.call(cctx, events.OpExec, req, &out)
	if cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		c.killProcess(req.SandboxID, req.ProcessID)
		return nil, gaveUp(ctx)
	}
	if err != nil {
		var e *events.Error
		if errors.As(err, &e) && e.Code == events.CodeExecutionTimeout {
			if r, ok := e.Details["result"]; ok {
				b, _ := json.Marshal(r)
				var partial events.ExecResult
				if json.Unmarshal(b, &partial) == nil {
					return &partial, err
				}
			}
		}
		return nil, err
	}
	return &out, nil
}

// execContext bounds a buffered exec or run_code whose ctx has no deadline
// by its own timeout plus a margin; call applies the request timeout when
// there is neither.
func (c *Client) execContext(ctx context.Context, timeoutMS int64) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || timeoutMS <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond+30*time.Second)
}

// gaveUp is the error of a call abandoned by its context or a deadline.
func gaveUp(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

func (c *Client) killProcess(sandboxID, processID string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	_ = c.Signal(ctx, sandboxID, processID, "KILL")
}

// RunCode runs code in the sandbox's interpreter.
func (c *Client) RunCode(ctx context.Context, req events.RunCodeRequest) (*events.RunCodeReply, error) {
	if req.ProcessID == "" {
		req.ProcessID = events.NewID()
	}
	cctx, cancel := c.execContext(ctx, req.TimeoutMS)
	defer cancel()
	var out events.RunCodeReply
	err := c.call(cctx, events.OpRunCode, req, &out)
	if cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		c.killProcess(req.SandboxID, req.ProcessID)
		return nil, gaveUp(ctx)
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Signal sends a signal (KILL, TERM, INT, HUP, QUIT, USR1, USR2) to a process.
func (c *Client) Signal(ctx context.Context, sandboxID, processID, signal string) error {
	return c.call(ctx, events.OpSignal, events.SignalRequest{SandboxID: sandboxID, ProcessID: processID, Signal: signal}, nil)
}

// SendStdin writes to a streamed process started with KeepStdinOpen; close
// ends its stdin.
func (c *Client) SendStdin(ctx context.Context, sandboxID, processID string, data []byte, closeStdin bool) error {
	s, enc := events.EncodeBytes(data)
	return c.call(ctx, events.OpStdin, events.StdinRequest{SandboxID: sandboxID, ProcessID: processID, Data: s, Encoding: enc, Close: closeStdin}, nil)
}

// Kill removes a sandbox; killing one that is already gone succeeds.
func (c *Client) Kill(ctx context.Context, sandboxID string) (*events.KillReply, error) {
	var out events.KillReply
	if err := c.call(ctx, events.OpKill, events.KillRequest{SandboxID: sandboxID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get returns a sandbox's record.
func (c *Client) Get(ctx context.Context, sandboxID string) (*events.Sandbox, error) {
	var out events.Sandbox
	if err := c.call(ctx, events.OpGet, events.GetRequest{SandboxID: sandboxID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns the sandboxes that match the filters.
func (c *Client) List(ctx context.Context, req events.ListRequest) ([]events.Sandbox, error) {
	var out events.ListReply
	if err := c.call(ctx, events.OpList, req, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// SetTimeout moves a sandbox's deadline to now + timeout.
func (c *Client) SetTimeout(ctx context.Context, sandboxID string, timeout time.Duration) (time.Time, error) {
	var out events.SetTimeoutReply
	secs := int((timeout + time.Second - 1) / time.Second)
	if err := c.call(ctx, events.OpSetTimeout, events.SetTimeoutRequest{SandboxID: sandboxID, TimeoutS: secs}, &out); err != nil {
		return time.Time{}, err
	}
	return out.Deadline, nil
}

// Backends describes the live backends and the classes.
func (c *Client) Backends(ctx context.Context) (*events.BackendsReply, error) {
	var out events.BackendsReply
	if err := c.call(ctx, events.OpBackends, events.BackendsRequest{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// tenantToken is the caller's tenant token for subjects.
func (c *Client) tenantToken() string {
	if c.tenant != "" {
		return c.tenant
	}
	return events.TenantOpen
}
