package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/natstrace"
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
	// lostCheck is how long a request may wait before the client checks
	// for a fault that lost its reply (replylost.go), and then how often.
	lostCheck time.Duration
	routers   routerSet
	owner     string
	log       *slog.Logger
	// onBehalf is the request info (Nats-Request-Info) every API request
	// carries, naming the account the client acts for (WithOnBehalfOf).
	onBehalf    string
	onBehalfErr error

	// Connect's settings: extra nats options, what the credentials are (for
	// errors, never the secret itself) and the first bad option.
	natsOpts []nats.Option
	creds    []string
	optErr   error

	// forceAPI makes the client use the API paths (attach, files.get…) as
	// a tenant must, even where JetStream is reachable (tests).
	forceAPI bool
	// onAttempt, when set (tests), sees each attempt of a request and why
	// it got no reply (nil: it got one).
	onAttempt func(op string, err error)

	mu sync.Mutex
	// sess is who the server says the caller is; see session. asking
	// holds a token while session asks.
	sess      session
	asking    chan struct{}
	jsKnown   bool // jsOK is a definite answer
	jsOK      bool
	jsUntil   time.Time // jsOK (false) holds until then
	backends  *events.BackendsReply
	backendAt time.Time
}

// session is how the client reaches output and files.
type session struct {
	known bool
	// tenant is the caller's tenant token as the server knows it
	// (events.TenantOpen on an open deployment or inside the services
	// account).
	tenant string
	// api: no JetStream of the services account (a tenant): output comes
	// through live subjects and attach, large files through files.get/put.
	api bool
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

// WithOwner stamps created sandboxes with an owner. An authenticated
// deployment ignores it: the owner is the tenant the server names.
func WithOwner(owner string) Option { return func(c *Client) { c.owner = owner } }

// WithOnBehalfOf makes every API request name account (a tenant's NATS
// account, as events.ValidTenant) as its caller in the Nats-Request-Info
// header, so that the router serves it as that tenant: its quotas, its
// sandboxes only, its output subjects. Only a user of the services account
// can act for a tenant this way: on a request that crosses a service
// import (every tenant's), nats-server replaces the header with the
// caller's own account. It is for front doors that authenticate their own
// callers (the E2B-compatible HTTP API); New and Connect refuse an account
// that is not a valid tenant token or is events.TenantOpen.
func WithOnBehalfOf(account string) Option {
	return func(c *Client) {
		if !events.ValidTenant(account) || account == events.TenantOpen {
			c.onBehalfErr = fmt.Errorf("client: on behalf of %q: not a tenant account", account)
			return
		}
		b, _ := json.Marshal(events.RequestInfo{Account: account})
		c.onBehalf = string(b)
	}
}

// WithCreds authenticates Connect with a NATS credentials file (a user JWT
// and its nkey seed, as `sandboxio tenant add` or `nsc` write them).
func WithCreds(file string) Option {
	return func(c *Client) {
		c.creds = append(c.creds, "creds file "+file)
		if err := readable(file); err != nil {
			c.setOptErr(fmt.Errorf("client: creds file %s: %w", file, err))
			return
		}
		c.natsOpts = append(c.natsOpts, nats.UserCredentials(file))
	}
}

// WithNKey authenticates Connect with an nkey seed file (SU…).
func WithNKey(seedFile string) Option {
	return func(c *Client) {
		c.creds = append(c.creds, "nkey seed file "+seedFile)
		o, err := nats.NkeyOptionFromSeed(seedFile)
		if err != nil {
			c.setOptErr(fmt.Errorf("client: nkey seed file %s: %w", seedFile, err))
			return
		}
		c.natsOpts = append(c.natsOpts, o)
	}
}

// WithUserInfo authenticates Connect with a user and password.
func WithUserInfo(user, password string) Option {
	return func(c *Client) {
		c.creds = append(c.creds, "user "+user)
		c.natsOpts = append(c.natsOpts, nats.UserInfo(user, password))
	}
}

// WithToken authenticates Connect with a token.
func WithToken(token string) Option {
	return func(c *Client) {
		c.creds = append(c.creds, "token")
		c.natsOpts = append(c.natsOpts, nats.Token(token))
	}
}

// WithTLS makes Connect use TLS: caFile (PEM) verifies the server (empty:
// the system roots), certFile and keyFile (both or neither) are the client
// certificate for servers that require one.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(c *Client) {
		desc := "TLS"
		if caFile != "" {
			desc += " (CA " + caFile + ")"
			if err := readable(caFile); err != nil {
				c.setOptErr(fmt.Errorf("client: TLS CA file %s: %w", caFile, err))
				return
			}
			c.natsOpts = append(c.natsOpts, nats.RootCAs(caFile))
		}
		if (certFile == "") != (keyFile == "") {
			c.setOptErr(fmt.Errorf("client: TLS client certificate needs both a certificate and a key file (got %q and %q)", certFile, keyFile))
			return
		}
		if certFile != "" {
			desc += " with client certificate " + certFile
			for _, f := range []string{certFile, keyFile} {
				if err := readable(f); err != nil {
					c.setOptErr(fmt.Errorf("client: TLS file %s: %w", f, err))
					return
				}
			}
			c.natsOpts = append(c.natsOpts, nats.ClientCert(certFile, keyFile))
		}
		c.creds = append(c.creds, desc)
		c.natsOpts = append(c.natsOpts, nats.Secure())
	}
}

// WithNATSOptions passes further options to nats.Connect (after the
// client's own, so they win).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *Client) { c.natsOpts = append(c.natsOpts, opts...) }
}

func (c *Client) setOptErr(err error) {
	if c.optErr == nil {
		c.optErr = err
	}
}

func readable(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	return f.Close()
}

func newClient(opts []Option) *Client {
	c := &Client{grace: teardownGraceFromEnv(), timeout: 2 * time.Minute, idleCheck: 5 * time.Second, lostCheck: defaultLostCheck,
		asking: make(chan struct{}, 1)}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c
}

// New wraps an existing connection; Close leaves it open. Connection
// options (WithCreds, WithTLS …) have no effect here: the caller made the
// connection. Who the caller is (Tenant) is asked on first use.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	c := newClient(opts)
	if c.onBehalfErr != nil {
		return nil, c.onBehalfErr
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.nc, c.js = nc, js
	return c, nil
}

// Connect dials url (empty: SBX_NATS_URL, else DefaultURL) with the
// credentials and TLS options given (none given: those the SBX_NATS_*
// variables name, SettingsFromEnv), then asks the deployment who the
// caller is (the quota op), so that a tenant reads output and files
// through the API. Wrong, expired or revoked credentials fail at once with
// an error naming them (errors.Is nats.ErrAuthorization …); the client
// never retries a refused connect.
func Connect(url string, opts ...Option) (*Client, error) {
	env := SettingsFromEnv()
	if url == "" {
		url = env.URL
	}
	if url == "" {
		url = DefaultURL
	}
	c := newClient(opts)
	if len(c.creds) == 0 {
		for _, o := range env.Options() {
			o(c)
		}
	}
	if c.optErr != nil {
		return nil, c.optErr
	}
	if c.onBehalfErr != nil {
		return nil, c.onBehalfErr
	}
	log := c.log
	nopts := append([]nats.Option{nats.Name("sandboxio-client"), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats", "subject", subject, "err", err)
		})}, c.natsOpts...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, connectError(url, c.creds, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("client: %w", err)
	}
	c.nc, c.js, c.ownsNC = nc, js, true
	// Connect takes no context: asking for the session is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.session(ctx)
	return c, nil
}

// connectError names what failed: the server, the credentials used (never
// their secret) and, for a refusal, that the credentials were the cause.
func connectError(url string, creds []string, err error) error {
	with := "no credentials"
	if len(creds) > 0 {
		with = strings.Join(creds, ", ")
	}
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return fmt.Errorf("client: connect %s: the server refused %s (wrong, expired or revoked, or of an account it does not know): %w", url, with, err)
	}
	return fmt.Errorf("client: connect %s (%s): %w", url, with, err)
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

// call sends one request and decodes the reply into out. An answer the
// router gave because the caller's deadline was near (details
// caller_deadline) also matches context.DeadlineExceeded.
func (c *Client) call(ctx context.Context, op string, req, out any) error {
	resp, err := c.roundTrip(ctx, op, req)
	if err != nil {
		return err
	}
	err = decodeReply(op, resp, out)
	var e *events.Error
	if errors.As(err, &e) && e.Details["caller_deadline"] == true {
		return &deadlineError{e}
	}
	return err
}

// deadlineError is the router's answer at the caller's deadline: its code,
// and context.DeadlineExceeded.
type deadlineError struct{ e *events.Error }

func (d *deadlineError) Error() string   { return d.e.Error() }
func (d *deadlineError) Unwrap() []error { return []error{d.e, context.DeadlineExceeded} }

// roundTrip sends one request; a failure to get any reply comes back as
// context.Canceled, context.DeadlineExceeded, SBX_E1623 ReplyLost (the
// reply was lost to a fault: replylost.go) or BackendUnavailable wrapping
// the nats error (errors.Is nats.ErrNoResponders).
func (c *Client) roundTrip(ctx context.Context, op string, req any) (*nats.Msg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode %s: %w", op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// A create that names its sandbox is safe to send again (ADR 37): a
	// second one answers the sandbox the first made.
	namedCreate := isNamedCreate(op, req)
	safe := idempotent[op] || namedCreate
	var rt retrier
	for sent := 0; ; sent++ {
		actx, acancel := attemptContext(ctx, op)
		msg := nats.NewMsg(events.APISubject(op))
		msg.Data = data
		if c.onBehalf != "" {
			msg.Header.Set(events.HeaderRequestInfo, c.onBehalf)
		}
		if dl, ok := actx.Deadline(); ok {
			// The router bounds the command by it and answers in time
			// (SBX_E1602 or SBX_E1203 with details.caller_deadline).
			msg.Header.Set(events.HeaderCallerTimeout, strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10))
		}
		if trace.SpanContextFromContext(ctx).IsValid() {
			// The caller's span: the router's and worker's spans join its trace.
			natstrace.Inject(ctx, msg.Header)
		}
		resend := safe && sent < maxResends
		resp, why, err := c.request(actx, msg, resend)
		acancel()
		if c.onAttempt != nil {
			c.onAttempt(op, err)
		}
		if err == nil {
			return resp, nil
		}
		if (retriedOps[op] || namedCreate) && rt.again(ctx, err, retriedOps[op]) {
			continue
		}
		switch {
		case why != "" && ctx.Err() == nil && resend:
			continue // the reply may be lost: an idempotent request goes again
		case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
			return nil, context.Canceled
		case why != "" && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)):
			return nil, replyLost(op, why, true)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			return nil, context.DeadlineExceeded
		case errors.Is(err, nats.ErrNoResponders):
			return nil, &noResponders{events.Errorf(events.CodeBackendUnavailable, "no sandboxio router answers on %s", msg.Subject)}
		}
		return nil, events.Errorf(events.CodeBackendUnavailable, "%s: %v", op, err)
	}
}

// request sends msg and waits for its reply under a lostWatch; why says
// what may have lost the reply. With resend, the wait ends as soon as a
// loss is suspected (err is then context.Canceled with ctx still live).
func (c *Client) request(ctx context.Context, msg *nats.Msg, resend bool) (*nats.Msg, string, error) {
	rctx := ctx
	var onSuspect func()
	if resend {
		// Only a request that may go again needs its wait cut short.
		var cancel context.CancelCauseFunc
		rctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		onSuspect = func() { cancel(errSuspect) }
	}
	w := c.watchRequest(onSuspect)
	resp, err := c.nc.RequestMsgWithContext(rctx, msg)
	why := w.stop()
	if err != nil && errors.Is(context.Cause(rctx), errSuspect) && ctx.Err() == nil {
		return nil, why, context.Canceled
	}
	if err == nil {
		why = ""
	}
	return resp, why, err
}

// Get, list and kill are safe to send again whatever became of the first
// request: on no responders (no router yet, or between two) or no answer
// within an attempt, the client sends them again within the caller's
// deadline, backing off between attempts; no responders for at most
// noRouterWindow in a row.
var retriedOps = map[string]bool{events.OpGet: true, events.OpList: true, events.OpKill: true}

const (
	// noRouterWindow bounds how long a request goes on finding no router:
	// a router's restart takes from 0.6 s to several seconds
	// (docs/operations.md).
	noRouterWindow   = 10 * time.Second
	retryBackoffMin  = 50 * time.Millisecond
	retryBackoffMax  = time.Second
	minAttemptLength = 2 * time.Second
)

// attemptContext bounds one attempt of a retried op: half the time left
// (at least minAttemptLength, or all of it when less is left); other ops'
// attempts have all of it.
func attemptContext(ctx context.Context, op string) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !retriedOps[op] || !ok {
		return context.WithCancel(ctx)
	}
	left := time.Until(dl)
	return context.WithTimeout(ctx, max(left/2, min(left, minAttemptLength)))
}

// retrier paces the attempts of a request that is safe to send again.
type retrier struct {
	n int // attempts sent again so far
	// noRouterSince is when the attempts began to find no router (zero:
	// the last one found one).
	noRouterSince time.Time
}

// again reports whether a failed attempt goes again, after a back-off
// (doubling from retryBackoffMin to retryBackoffMax) bounded by ctx: on no
// responders while they have lasted less than noRouterWindow, and with
// timeouts also on an attempt without an answer (each attempt has at least
// part of the time left: the deadline bounds them).
func (r *retrier) again(ctx context.Context, err error, timeouts bool) bool {
	if ctx.Err() != nil {
		return false
	}
	backoff := min(retryBackoffMin<<min(r.n, 8), retryBackoffMax)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		if r.noRouterSince.IsZero() {
			r.noRouterSince = time.Now()
		}
		if time.Since(r.noRouterSince)+backoff > noRouterWindow {
			return false
		}
	case timeouts && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)):
		r.noRouterSince = time.Time{}
	default:
		return false
	}
	t := time.NewTimer(backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		r.n++
		return true
	}
}

// isNamedCreate reports whether req is a create that names its sandbox.
func isNamedCreate(op string, req any) bool {
	r, ok := req.(events.CreateRequest)
	return ok && op == events.OpCreate && r.SandboxID != ""
}

// noResponders is BackendUnavailable that also matches nats.ErrNoResponders.
type noResponders struct{ err *events.Error }

func (e *noResponders) Error() string   { return e.err.Error() }
func (e *noResponders) Unwrap() []error { return []error{e.err, nats.ErrNoResponders} }

// decodeReply turns an error reply into its *events.Error and decodes a
// success into out.
func decodeReply(op string, resp *nats.Msg, out any) error {
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

// Create creates a sandbox and returns a handle on it. The lifetime is
// WithLifetime (a time.Duration), or the request's TimeoutS in seconds;
// without either the server refuses with events.ErrLifetimeRequired. If
// ctx is cancelled the sandbox, if it was created meanwhile, is killed
// within the teardown grace.
//
// A create always names its sandbox (the client chooses the id when
// req.SandboxID is empty), so it is sent again, within ctx, when no router
// answers yet (backing off up to 1 s, for at most 10 s of no router in a
// row) or when the router holding it is lost while it waits (at most 3
// times); an attempt is never cut short by time. The second create of the same
// id and spec answers the sandbox the first made, never a second one (ADR
// 37). A create of an existing id with another spec fails with
// events.ErrSandboxExists.
func (c *Client) Create(ctx context.Context, req events.CreateRequest, opts ...CreateOption) (*Sandbox, error) {
	var set createSettings
	for _, o := range opts {
		o(&set)
	}
	if set.lifetime > 0 {
		req.TimeoutS = seconds(set.lifetime)
	}
	r, err := c.CreateWatch(ctx, req, set.progress)
	if err != nil {
		return nil, err
	}
	return &Sandbox{CreateReply: *r, c: c}, nil
}

// CreateWatch is Create that also passes the worker's progress messages (an
// image being pulled...) to progress while the create runs, and answers
// the bare reply.
//
// Deprecated: use Create with WithProgress, which returns a Sandbox handle.
func (c *Client) CreateWatch(ctx context.Context, req events.CreateRequest, progress func(msg string)) (*events.CreateReply, error) {
	if req.SandboxID == "" {
		req.SandboxID = events.NewID() // known before the reply, so a cancelled create can be undone
	}
	if progress != nil && events.ValidID(req.SandboxID) {
		sub, err := c.nc.Subscribe(events.ProgressSubject(c.tenantToken(ctx), req.SandboxID), func(m *nats.Msg) { progress(string(m.Data)) })
		if err == nil {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	if req.Owner == "" {
		req.Owner = c.owner
	}
	clearSecrets, sealed := req.Secrets, false
	if len(req.Secrets) > 0 && req.SealedSecrets == nil {
		var err error
		if sealed, err = c.sealSecrets(ctx, &req, false); err != nil {
			return nil, err
		}
	}
	var out events.CreateReply
	err := c.call(ctx, events.OpCreate, req, &out)
	if sealed && staleSealKey(err) && ctx.Err() == nil {
		// The backend's workers have another key than the one cached (a
		// worker restarted): the router refused and created nothing.
		req.Secrets, req.SealedSecrets = clearSecrets, nil
		if _, err = c.sealSecrets(ctx, &req, true); err == nil {
			err = c.call(ctx, events.OpCreate, req, &out)
		}
	}
	if ctx.Err() != nil || errors.Is(err, events.ErrReplyLost) || errors.Is(err, context.DeadlineExceeded) {
		// Given up, or the answer lost: what the create made must not live on.
		c.teardown(req.SandboxID)
		return nil, gaveUpWith(ctx, err)
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// teardown kills a sandbox whose create or use was abandoned, within the
// grace, retrying while the create may still be queued.
func (c *Client) teardown(id string) {
	// The teardown grace: it must not inherit the cancellation that
	// abandoned the sandbox.
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
//
// Exec takes the wire request (its timeout in milliseconds);
// Sandbox.Exec is the same with a time.Duration (client.Timeout).
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
		return nil, gaveUpWith(ctx, err)
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

// gaveUpWith is gaveUp, except that a coded answer at the deadline (the
// router's at the caller's deadline, or SBX_E1623 for a reply lost to a
// fault; both also match context.DeadlineExceeded) is said as such, unless
// the caller cancelled.
func gaveUpWith(ctx context.Context, err error) error {
	var e *events.Error
	if errors.As(err, &e) && !errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return gaveUp(ctx)
}

func (c *Client) killProcess(sandboxID, processID string) {
	// The teardown grace: it must not inherit the cancellation that
	// abandoned the process.
	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	_ = c.Signal(ctx, sandboxID, processID, "KILL")
}

// RunCode runs code in the sandbox's interpreter. It takes the wire
// request (timeout in milliseconds); Sandbox.RunCode takes a time.Duration.
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
		return nil, gaveUpWith(ctx, err)
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

// Quota returns who the server says the caller is (its tenant, events.TenantOpen
// on an open deployment), its limits and what it uses now.
func (c *Client) Quota(ctx context.Context) (*events.QuotaReply, error) {
	var out events.QuotaReply
	if err := c.call(ctx, events.OpQuota, events.QuotaRequest{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tenant is the caller's tenant token as the server knows it:
// events.TenantOpen on an open deployment (or an older router that does not
// say), else the NATS account the caller authenticated as. It asks the
// deployment on first use, within the request timeout.
func (c *Client) Tenant() string {
	// Tenant takes no context: bounded by the request timeout.
	ctx, cancel := context.WithTimeout(context.Background(), min(c.timeout, 10*time.Second))
	defer cancel()
	return c.session(ctx).tenant
}

// session returns who the caller is and how it reaches output and files,
// asking the deployment until it answers: the quota op names the tenant; a
// deployment whose router has no quota op is open. Only a definite answer
// is cached: while no router answers, each call asks again (two requests
// that fail at once with no responders).
func (c *Client) session(ctx context.Context) session { return c.askSession(ctx, true) }

// askSession is session; without olderRouters, a quota op nobody answers
// leaves the session undecided instead of asking for backends to tell an
// older router from none (the router refresh's question: it must not add
// requests a caller did not make).
func (c *Client) askSession(ctx context.Context, olderRouters bool) session {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s.known {
		return s
	}
	// One question at a time: a request's router refresh asks too
	// (mayPingRouters), and the second asker takes the first's answer. A
	// wait for the first is bounded by ctx: undecided, then.
	select {
	case c.asking <- struct{}{}:
		defer func() { <-c.asking }()
	case <-ctx.Done():
		return s
	}
	c.mu.Lock()
	s = c.sess
	c.mu.Unlock()
	if s.known {
		return s
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s = session{tenant: events.TenantOpen}
	var q events.QuotaReply
	resp, err := c.roundTrip(pctx, events.OpQuota, events.QuotaRequest{})
	if err == nil {
		err = decodeReply(events.OpQuota, resp, &q)
	}
	switch {
	case err == nil && events.ValidTenant(q.Tenant):
		s.tenant, s.known = q.Tenant, true
	case err == nil:
		s.known = true // a reply without a tenant: open
	case errors.Is(err, events.ErrUnknownOp):
		s.known = true // a router that knows no quota op: open
	case errors.Is(err, nats.ErrNoResponders) && olderRouters:
		// An older router has no quota endpoint; no router at all has
		// none either. Decide only if the router answers something else.
		if _, berr := c.roundTrip(pctx, events.OpBackends, events.BackendsRequest{}); berr == nil {
			s.known = true
		}
	}
	// Undecided (no router answered), the API paths, which work for every
	// caller: probing JetStream would be a permissions violation on a
	// tenant's connection.
	s.api = c.forceAPI || !s.known || s.tenant != events.TenantOpen || !c.jetStreamReachable(pctx)
	c.mu.Lock()
	if s.known {
		c.sess = s
	}
	c.mu.Unlock()
	c.log.Debug("sandboxio session", "tenant", s.tenant, "api_paths", s.api, "decided", s.known)
	return s
}

// jetStreamReachable: the services account's JetStream answers (an open
// deployment, or a caller inside the services account). The first definite
// answer is kept.
func (c *Client) jetStreamReachable(ctx context.Context) bool {
	c.mu.Lock()
	known, ok, until := c.jsKnown, c.jsOK, c.jsUntil
	c.mu.Unlock()
	if known || time.Now().Before(until) {
		return ok
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.js.Stream(ctx, events.StreamOutput)
	ok = err == nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		// Not found or no JetStream are answers too.
		c.jsKnown, c.jsOK = true, ok
	} else {
		// No answer in time (a tenant's denied publish, a server that is
		// restarting): assume none for a while rather than wait each time.
		c.jsOK, c.jsUntil = false, time.Now().Add(30*time.Second)
	}
	return ok
}

// tenantToken is the caller's tenant token for subjects.
func (c *Client) tenantToken(ctx context.Context) string { return c.session(ctx).tenant }
