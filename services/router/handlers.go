package router

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/natstrace"
)

// handler decodes and validates synchronously (cheap), then either answers
// from memory or forwards; nothing in it waits on the bus.
func (s *Service) handler(op string) micro.HandlerFunc {
	return func(req micro.Request) {
		req = s.outcomes.begin(op, req)
		if !s.enter() {
			respondError(req, events.Errorf(events.CodeBackendUnavailable, "the router is stopping; retry"))
			return
		}
		defer s.leave()
		if s.draining.Load() {
			respondError(req, events.Errorf(events.CodeBackendUnavailable, "the router is stopping; retry"))
			return
		}
		if e := events.CheckHeaders(req.Headers()); e != nil {
			respondError(req, e)
			return
		}
		c, e := callerOf(req.Headers())
		if e == nil {
			e = s.checkRate(c, op, len(req.Data()))
		}
		if e != nil {
			respondError(req, e)
			return
		}
		c.until = callerUntil(req.Headers())
		r, _ := events.NewRequest(op)
		if e := events.Decode(req.Data(), r); e != nil {
			respondError(req, e)
			return
		}
		if e := r.Validate(); e != nil {
			respondError(req, e)
			return
		}
		traceparent := headerValue(req.Headers(), events.HeaderTraceparent)
		if s.durableRequest(req.Reply(), c, r, traceparent) {
			return // durable.go
		}
		switch r := r.(type) {
		case *events.CreateRequest:
			if len(r.Ports) > 0 {
				s.createWithPorts(req, c, r, traceparent)
				return
			}
			s.create(req, c, r, traceparent)
		case *events.GetRequest:
			s.async(req, func(ctx context.Context) (any, *events.Error) { return s.get(ctx, c, r.SandboxID) })
		case *events.ListRequest:
			s.async(req, func(ctx context.Context) (any, *events.Error) {
				if err := s.syncRegistry(ctx); err != nil {
					return nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
				}
				return s.list(c, r), nil
			})
		case *events.BackendsRequest:
			respond(req, s.backends())
		case *events.QuotaRequest:
			respond(req, s.quota(c))
		case *events.AttachRequest:
			s.attach(req, c, r)
		case *events.FilesGetRequest:
			s.async(req, func(ctx context.Context) (any, *events.Error) { return s.filesGet(ctx, c, r) })
		case *events.FilesPutRequest:
			s.async(req, func(ctx context.Context) (any, *events.Error) { return s.filesPut(ctx, c, r) })
		case *events.PortsExposeRequest, *events.PortsListRequest, *events.PortsUnexposeRequest, *events.PortsTokenRequest:
			s.ports(req, c, r, traceparent)
		default:
			id, ok := events.SandboxTarget(r)
			if !ok {
				respondError(req, events.Errorf(events.CodeUnknownOp, "op %s is not served", op))
				return
			}
			s.forward(req, c, op, id, r, traceparent)
		}
	}
}

// headerValue reads a header case-insensitively: other languages' clients
// may write Traceparent where nats.go would look up traceparent.
func headerValue(h micro.Headers, key string) string {
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

func respond(req micro.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		respondError(req, events.Errorf(events.CodeInternal, "encode reply: %v", err))
		return
	}
	_ = req.Respond(b)
}

func respondError(req micro.Request, e *events.Error) {
	_ = req.Error(strconv.Itoa(e.Code.Number()), e.Name+": "+e.Message, events.EncodeError(e))
}

// publishReply answers a client outside its handler (micro's Respond must
// not outlive the handler), with the micro error headers set by hand.
func (s *Service) publishReply(to string, body []byte, e *events.Error) {
	if to == "" {
		return
	}
	s.outcomes.end(to, errCode(e))
	m := nats.NewMsg(to)
	if e != nil {
		m.Header[events.HeaderServiceErrorCode] = []string{strconv.Itoa(e.Code.Number())}
		m.Header[events.HeaderServiceError] = []string{e.Name + ": " + e.Message}
		body = events.EncodeError(e)
	}
	m.Data = body
	if err := s.nc.PublishMsg(m); err != nil {
		s.log.Warn("reply to client failed", slog.Any("err", err))
	}
}

// async runs f off the handler goroutine and answers with its result.
func (s *Service) async(req micro.Request, f func(ctx context.Context) (any, *events.Error)) {
	to := req.Reply()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(10 * time.Second)
		defer cancel()
		v, e := f(ctx)
		if e != nil {
			s.publishReply(to, nil, e)
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			s.publishReply(to, nil, events.Errorf(events.CodeInternal, "encode reply: %v", err))
			return
		}
		s.publishReply(to, b, nil)
	}()
}

// ---- placement ----

// place checks that a live worker of the spec's backend can take the
// request, and returns the capabilities and tier it will get.
func (s *Service) place(spec events.ClassSpec, req *events.CreateRequest) *events.Error {
	s.mu.RLock()
	var live []events.WorkerLease
	for _, l := range s.leases {
		if l.Backend == spec.Backend && time.Since(l.HeartbeatAt) < s.cfg.Bus.LeaseTTL+2*time.Second {
			live = append(live, l)
		}
	}
	s.mu.RUnlock()
	if len(live) == 0 {
		if !s.knownBackend(spec.Backend) {
			return events.Errorf(events.CodeUnknownBackend, "backend %q is not known to this deployment", spec.Backend).With("backend", spec.Backend)
		}
		return events.Errorf(events.CodeNoWorker, "no live worker serves backend %q", spec.Backend).With("backend", spec.Backend)
	}
	need := spec.RequireIsolation
	if req.RequireIsolation.Rank() > need.Rank() || need == "" {
		if req.RequireIsolation != "" {
			need = req.RequireIsolation
		}
	}
	want := append([]events.Capability(nil), req.Requires...)
	if req.Network != nil && len(req.Network.Allow) > 0 {
		want = append(want, events.CapNetworkAllowlist)
	}
	if len(req.Ports) > 0 {
		want = append(want, events.CapPorts)
	}
	var bestTier events.IsolationTier
	var missing []events.Capability
	for _, l := range live {
		tier, offered := l.TierFor(spec.Runtime)
		if !offered {
			tier = events.TierUnknown
		}
		if !offered || !tier.Satisfies(need) {
			if tier.Rank() > bestTier.Rank() || bestTier == "" {
				bestTier = tier
			}
			if !offered && need == "" {
				need = events.TierContainer // a runtime no worker offers can never be placed
			}
			continue
		}
		m := l.Capabilities.Missing(want)
		if len(m) == 0 {
			return nil
		}
		missing = m
	}
	if missing == nil {
		if spec.Runtime != "" {
			return events.Errorf(events.CodeIsolationUnavailable, "no live %q worker offers runtime %q with isolation %q (best: %q)", spec.Backend, spec.Runtime, need, bestTier).
				With("required", string(need)).With("offered", string(bestTier))
		}
		return events.Errorf(events.CodeIsolationUnavailable, "backend %q offers isolation %q; %q is required", spec.Backend, bestTier, need).
			With("required", string(need)).With("offered", string(bestTier))
	}
	e := events.Errorf(events.CodeCapabilityNotSupp, "backend %q cannot provide %v", spec.Backend, missing).With("missing", missing)
	if len(missing) == 1 && missing[0] == events.CapNetworkAllowlist {
		e = events.Errorf(events.CodeCapabilityNotSupp, "backend %q has no per-host egress filter: network.allow must be empty (egress allow opens all egress, deny none)", spec.Backend).With("missing", missing)
	}
	return e
}

// knownBackend: a backend named by the routing file, one of the built-in
// backends, or one some worker has announced.
func (s *Service) knownBackend(b string) bool {
	switch b {
	case "docker", "e2b", "modal", "fake":
		return true
	}
	for _, c := range s.cfg.Routing.Classes {
		if c.Backend == b {
			return true
		}
	}
	return false
}

// ---- create ----

func (s *Service) create(req micro.Request, c caller, r *events.CreateRequest, traceparent string) {
	spec, e := s.cfg.Routing.resolve(r)
	if e != nil {
		respondError(req, e)
		return
	}
	if e := s.checkResources(r); e != nil {
		respondError(req, e)
		return
	}
	if c.authed {
		r.Owner = c.tenant // the server says who the caller is; the body does not
	}
	var reqHash string
	if r.IdempotencyKey != "" {
		reqHash = requestHash(r) // before the secrets are sealed (each seal differs)
	}
	sh := specHash(c.tenant, spec, r) // before the seal too
	to := req.Reply()
	// prepare places the create and seals its secrets; nothing after it
	// sees a clear secret.
	prepare := func() *events.Error {
		if e := s.place(spec, r); e != nil {
			return e
		}
		return s.sealSecrets(spec.Backend, r)
	}
	if e := prepare(); e != nil {
		// The lease cache may trail the bucket: check the source, off the
		// handler, before refusing.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := s.workCtx(5 * time.Second)
			defer cancel()
			s.refreshLeases(ctx)
			if e := prepare(); e != nil {
				s.publishReply(to, nil, e)
				return
			}
			s.dispatchCreate(to, c, r, spec, traceparent, reqHash, sh)
		}()
		return
	}
	s.dispatchCreate(to, c, r, spec, traceparent, reqHash, sh)
}

// dispatchCreate queues a placed create. A client-chosen id that is in
// the registry already is a retry or a conflict (checkExistingID, ADR 37).
func (s *Service) dispatchCreate(to string, c caller, r *events.CreateRequest, spec events.ClassSpec, traceparent, reqHash, specHash string) {
	id := r.SandboxID
	if id == "" {
		id = events.NewID()
	}
	cmd := events.CreateCommand{SandboxID: id, Spec: spec, Request: *r, Tenant: c.tenant, SpecHash: specHash,
		Deadline: time.Now().UTC().Add(time.Duration(r.TimeoutS) * time.Second).Truncate(time.Millisecond)}
	opID := events.NewID()
	if c.authed && r.SandboxID != "" {
		// A tenant's own id: whether it is taken by another tenant must not
		// show, so read the registry itself (not the cache) before anything.
		s.checkExistingID(to, c, r, cmd, opID, traceparent, reqHash)
		return
	}
	if r.IdempotencyKey == "" {
		if _, known := s.cachedSandbox(id); known {
			s.checkExistingID(to, c, r, cmd, opID, traceparent, reqHash)
			return
		}
	}
	s.sendCreate(to, c, r, cmd, opID, traceparent, reqHash)
}

// sendCreate counts the create against the caller's quota and sends it.
func (s *Service) sendCreate(to string, c caller, r *events.CreateRequest, cmd events.CreateCommand, opID, traceparent, reqHash string) {
	if r.IdempotencyKey != "" {
		// Idempotent create: the first request with a key wins; later ones
		// with the same key and body get the same sandbox.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.idempotentCreate(to, c, r, cmd, opID, traceparent, reqHash)
		}()
		return
	}
	if e := s.reserveCreate(c, cmd.SandboxID, r.TimeoutS); e != nil {
		s.publishReply(to, nil, e)
		return
	}
	timeout, bounded := c.bound(s.cfg.CreateTimeout)
	s.publishCommand(to, events.OpCreate, events.CreateSubject(cmd.Spec.Backend), "", cmd.SandboxID, opID, traceparent, cmd, timeout,
		&pending{tenant: c.quotaTenant(), reserved: c.authed, backend: cmd.Spec.Backend, callerBound: bounded, createOp: opID, specHash: cmd.SpecHash})
}

// quotaTenant is the tenant a command is counted for: none for TenantOpen.
func (c caller) quotaTenant() string {
	if c.authed {
		return c.tenant
	}
	return ""
}

// requestHash identifies an idempotent request's body: everything but the
// sandbox id and the secrets (a hash of a secret is not stored anywhere;
// the same key with other secrets gets the first request's sandbox).
func requestHash(r *events.CreateRequest) string {
	body := *r
	body.SandboxID, body.Secrets, body.SealedSecrets = "", nil, nil
	b, _ := json.Marshal(body)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type idemRecord struct {
	SandboxID   string `json:"sandbox_id"`
	RequestHash string `json:"request_hash"`
}

func (s *Service) idempotentCreate(to string, c caller, r *events.CreateRequest, cmd events.CreateCommand, opID, traceparent, reqHash string) {
	ctx, cancel := s.workCtx(s.cfg.CreateTimeout)
	defer cancel()
	// The key is the tenant's: two tenants' equal keys never meet.
	keySum := sha256.Sum256([]byte(c.tenant + "\x00" + r.Owner + "\x00" + r.IdempotencyKey))
	key := hex.EncodeToString(keySum[:16])
	rec := idemRecord{SandboxID: cmd.SandboxID, RequestHash: reqHash}
	val, _ := json.Marshal(rec)
	// Count the create first, so that a refused one holds no key.
	if e := s.reserveCreate(c, cmd.SandboxID, r.TimeoutS); e != nil {
		s.publishReply(to, nil, e)
		return
	}
	if rev, err := s.idem.Create(ctx, key, val); err == nil {
		timeout, bounded := c.bound(s.cfg.CreateTimeout)
		s.publishCommand(to, events.OpCreate, events.CreateSubject(cmd.Spec.Backend), "", cmd.SandboxID, opID, traceparent, cmd, timeout,
			&pending{idem: &idemRef{key: key, revision: rev}, tenant: c.quotaTenant(), reserved: c.authed, backend: cmd.Spec.Backend, callerBound: bounded,
				createOp: opID, specHash: cmd.SpecHash})
		return
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		s.dropCreate(cmd.SandboxID)
		s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "idempotency store: %v", err))
		return
	}
	s.dropCreate(cmd.SandboxID) // another request with this key created it
	entry, err := s.idem.Get(ctx, key)
	if err != nil {
		s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "idempotency store: %v", err))
		return
	}
	var prev idemRecord
	_ = json.Unmarshal(entry.Value(), &prev)
	if prev.RequestHash != rec.RequestHash {
		s.publishReply(to, nil, events.Errorf(events.CodeIdempotencyConflict, "idempotency key was used for a different request"))
		return
	}
	// Same request: wait for the first one's sandbox to be ready.
	for {
		sb, ok, err := s.lookupSandbox(ctx, prev.SandboxID)
		if err == nil && ok {
			switch {
			case sb.State == events.StateRunning:
				b, _ := json.Marshal(events.CreateReply{SandboxID: sb.SandboxID, Backend: sb.Backend, Class: sb.Class,
					Isolation: sb.Isolation, Capabilities: sb.Capabilities, Deadline: sb.Deadline})
				s.publishReply(to, b, nil)
				return
			case sb.State.Ended():
				s.publishReply(to, nil, events.Errorf(events.CodeSandboxGone, "the sandbox created for this idempotency key is %s", sb.State))
				return
			}
		}
		select {
		case <-ctx.Done():
			s.publishReply(to, nil, events.Errorf(events.CodeCreateTimeout, "the sandbox for this idempotency key was not ready in time"))
			return
		case <-time.After(25 * time.Millisecond): // polling the registry for another request's outcome
		}
	}
}

func (s *Service) cachedSandbox(id string) (events.Sandbox, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sb, ok := s.sandboxes[id]
	return sb, ok
}

// ---- forwarding ----

func (s *Service) forward(req micro.Request, c caller, op, id string, r events.Request, traceparent string) {
	sb, ok := s.cachedSandbox(id)
	if ok {
		s.forwardTo(req.Reply(), c, op, sb, r, req.Data(), traceparent)
		return
	}
	to, data := req.Reply(), append([]byte(nil), req.Data()...)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(5 * time.Second)
		defer cancel()
		sb, e := s.authorize(ctx, c, id)
		if e != nil {
			s.publishReply(to, nil, e)
			return
		}
		s.forwardTo(to, c, op, sb, r, data, traceparent)
	}()
}

// forwardTo checks that the caller may address the sandbox (first: an
// ended sandbox of another tenant is as forbidden as a live one), then
// sends the command to the worker that holds it.
func (s *Service) forwardTo(to string, c caller, op string, sb events.Sandbox, r events.Request, data []byte, traceparent string) {
	if _, e := checkOwner(c, sb.SandboxID, sb, true); e != nil {
		s.publishReply(to, nil, e)
		return
	}
	if s.durableForward(to, c, op, sb, r, data, traceparent) {
		return // durable.go
	}
	if sb.State.Ended() {
		if op == events.OpKill {
			b, _ := json.Marshal(events.KillReply{SandboxID: sb.SandboxID, State: sb.State, AlreadyGone: true})
			s.publishReply(to, b, nil)
			return
		}
		s.publishReply(to, nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is %s: %s", sb.SandboxID, sb.State, sb.EndReason).With("sandbox_id", sb.SandboxID))
		return
	}
	key := events.WorkerKey(sb.Backend, sb.Worker)
	if !s.liveLease(key) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := s.workCtx(5 * time.Second)
			defer cancel()
			if !s.refreshLease(ctx, key) {
				s.publishReply(to, nil, workerLost(op, sb.SandboxID))
				return
			}
			s.forwardTo(to, c, op, sb, r, data, traceparent)
		}()
		return
	}
	p := &pending{tenant: c.quotaTenant()}
	timeout := s.cfg.RequestTimeout
	payload := json.RawMessage(data)
	switch r := r.(type) {
	case *events.FilesReadRequest:
		if !loaded(s.filesLoaded) {
			s.afterFilesLoaded(to, sb.SandboxID, func() { s.forwardTo(to, c, op, sb, r, data, traceparent) })
			return
		}
		cmd, g, err := s.grantRead(sb, r)
		if err != nil {
			s.publishReply(to, nil, events.Errorf(events.CodeInternal, "encode command: %v", err))
			return
		}
		if g != nil {
			payload, p.read = cmd, g
		}
	case *events.FilesWriteRequest:
		if e := checkFileRef(c, r); e != nil {
			s.publishReply(to, nil, e)
			return
		}
	case *events.FilesWatchRequest:
		// A long poll: the answer comes when the watch ends.
		timeout = time.Duration(cmp.Or(r.TimeoutMS, events.DefaultWatchTimeoutMS))*time.Millisecond + s.cfg.ReplyMargin
	case *events.SetTimeoutRequest:
		counted, e := s.checkExtend(c, sb, r.TimeoutS)
		if e != nil {
			s.publishReply(to, nil, e)
			return
		}
		p.extended = counted
	}
	if op == events.OpExec || op == events.OpRunCode {
		t := execBounds(r)
		switch {
		case t.Stream:
			p.stream = true
			if t.TimeoutMS > 0 {
				p.until = time.Now().Add(time.Duration(t.TimeoutMS)*time.Millisecond + s.cfg.ReplyMargin)
			}
		case t.TimeoutMS > 0:
			timeout = time.Duration(t.TimeoutMS)*time.Millisecond + s.cfg.ReplyMargin
		default:
			timeout = time.Until(sb.Deadline) + s.cfg.ReplyMargin
			p.untilDeadline = true
		}
		if e := s.beginExec(c); e != nil {
			s.publishReply(to, nil, e.With("sandbox_id", sb.SandboxID))
			return
		}
		p.execTenant = c.quotaTenant()
	}
	if t, bounded := c.bound(timeout); bounded {
		timeout, p.callerBound, p.untilDeadline = t, true, false
	}
	s.publishCommand(to, op, events.NodeSubject(sb.Backend, sb.Worker, events.Verb(op)), key, sb.SandboxID, events.NewID(), traceparent, payload, timeout, p)
}

// startSpan starts the router's span of a forwarded request, a child of the
// caller's traceparent, and returns the traceparent the command carries (the
// router span's context; the caller's when tracing is off).
func (s *Service) startSpan(op, opID, sandboxID, traceparent string) (trace.Span, string) {
	if _, off := s.tracer.(noop.Tracer); off {
		// Nothing records spans: the command carries the caller's context
		// as it came (what injecting a non-recording child gives), without
		// the attributes and the header map of a span nobody keeps.
		return noopSpan, traceparent
	}
	// A command's span descends from the request's traceparent: micro gives a handler no context.
	ctx := natstrace.ContextWithTraceparent(context.Background(), traceparent, "")
	ctx, span := s.tracer.Start(ctx, "sandboxio.router."+op, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("sandboxio.op", op), attribute.String("sandboxio.op_id", opID),
			attribute.String("sandboxio.sandbox_id", sandboxID), attribute.String("sandboxio.router_id", s.cfg.RouterID)))
	h := nats.Header{}
	natstrace.Inject(ctx, h)
	if tp := h.Get(events.HeaderTraceparent); tp != "" {
		traceparent = tp
	}
	return span, traceparent
}

// noopSpan is the span of a command when tracing is off.
var noopSpan = trace.SpanFromContext(context.Background())

// endSpan ends a router span with the outcome's error code, if any (the code
// only: messages may quote user data).
func endSpan(span trace.Span, code events.Code) {
	if code != "" {
		span.SetAttributes(attribute.String("sandboxio.error_code", string(code)))
		span.SetStatus(codes.Error, string(code))
	}
	span.End()
}

// settle releases a finished command's quota accounting: a failed create
// stops counting, a successful one counts until the registry cache has
// its sandbox; an exec stops counting, unless it is a streamed exec that
// started, which counts until its exit marker.
func (s *Service) settle(p *pending, msg *nats.Msg, ok bool) {
	if p.reserved {
		if ok {
			s.createDone(p.sandboxID)
		} else {
			s.dropCreate(p.sandboxID)
		}
	}
	if p.extended {
		s.extendDone(p.sandboxID, ok)
	}
	if p.read != nil {
		s.settleRead(p.read, msg)
	}
	if p.execTenant == "" {
		return
	}
	if !ok || !p.stream {
		s.endExec(p.execTenant)
		return
	}
	var started events.ExecStreamReply
	_ = json.Unmarshal(msg.Data, &started)
	s.execStreaming(p.execTenant, p.sandboxID, started.ProcessID, p.until)
}

// releaseIdempotency frees the idempotency key of a create that failed, so
// that a retry with the same key creates a sandbox instead of finding the
// failed one. A create that merely timed out keeps its key while its
// sandbox may still appear.
func (s *Service) releaseIdempotency(p *pending) {
	if p.idem == nil {
		return
	}
	ref, sandboxID := *p.idem, p.sandboxID
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.cleanupCtx(5 * time.Second)
		defer cancel()
		if sb, ok, err := s.readSandbox(ctx, sandboxID); err != nil || ok && !sb.State.Ended() {
			return // live or still being created (or unknown now): keep the key
		}
		if err := s.idem.Delete(ctx, ref.key, jetstream.LastRevision(ref.revision)); err != nil {
			s.log.Warn("idempotency key not released", slog.Any("err", err))
		}
	}()
}

// ---- reads ----

func (s *Service) get(ctx context.Context, c caller, id string) (any, *events.Error) {
	sb, ok, err := s.readSandbox(ctx, id)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
	}
	sb, e := checkOwner(c, id, sb, ok)
	if e != nil {
		return nil, e
	}
	return tenantView(sb), nil
}

// list answers from the cache: a tenant sees only its own sandboxes (and
// its owner filter is moot: the owner of each is the tenant).
func (s *Service) list(c caller, r *events.ListRequest) events.ListReply {
	owner := r.Owner
	if c.authed {
		owner = ""
	}
	limit := r.Limit
	if limit == 0 {
		limit = 1000
	}
	// Sort small references, then copy only the records that are
	// returned: at 10,000 live sandboxes copying and sorting the records
	// themselves cost more than encoding the 1,000 the reply holds.
	type ref struct {
		at time.Time
		id string
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	refs := make([]ref, 0, min(len(s.sandboxes), 4096))
	for id, sb := range s.sandboxes {
		if !c.may(sb) {
			continue
		}
		if r.Backend != "" && sb.Backend != r.Backend || owner != "" && sb.Owner != owner {
			continue
		}
		if r.State != "" && sb.State != r.State || r.State == "" && sb.State.Ended() {
			continue
		}
		match := true
		for k, v := range r.Metadata {
			if sb.Metadata[k] != v {
				match = false
				break
			}
		}
		if match {
			refs = append(refs, ref{sb.CreatedAt, id})
		}
	}
	// Newest first; equal times by id, so that pages are stable.
	slices.SortFunc(refs, func(a, b ref) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	refs = refs[:min(len(refs), limit)]
	out := make([]events.Sandbox, len(refs))
	for i, x := range refs {
		out[i] = tenantView(s.sandboxes[x.id])
	}
	return events.ListReply{Sandboxes: out}
}

func (s *Service) backends() events.BackendsReply {
	s.mu.RLock()
	by := map[string]*events.BackendInfo{}
	for _, l := range s.leases {
		if time.Since(l.HeartbeatAt) >= s.cfg.Bus.LeaseTTL+2*time.Second {
			continue
		}
		b := by[l.Backend]
		if b == nil {
			b = &events.BackendInfo{Name: l.Backend, Isolation: l.Isolation, Capabilities: l.Capabilities}
			by[l.Backend] = b
		}
		b.Workers = append(b.Workers, l)
		b.Capacity += l.Capacity
		b.Load += l.Load
		if l.Isolation.Rank() > b.Isolation.Rank() {
			b.Isolation = l.Isolation
		}
	}
	s.mu.RUnlock()
	reply := events.BackendsReply{Backends: []events.BackendInfo{}, Classes: []events.ClassInfo{}}
	for _, b := range by {
		if keys := s.sealKeys(b.Name); len(keys) > 0 {
			b.SealKey = keys[0] // the key the router itself seals to
		}
		sort.Slice(b.Workers, func(i, j int) bool { return b.Workers[i].Worker < b.Workers[j].Worker })
		reply.Backends = append(reply.Backends, *b)
	}
	sort.Slice(reply.Backends, func(i, j int) bool { return reply.Backends[i].Name < reply.Backends[j].Name })
	for _, n := range s.cfg.Routing.classNames() {
		c := s.cfg.Routing.Classes[n]
		reply.Classes = append(reply.Classes, events.ClassInfo{Name: n, Backend: c.Backend,
			RequireIsolation: events.IsolationTier(c.RequireIsolation), Default: n == s.cfg.Routing.DefaultClass})
	}
	return reply
}

// execBounds is what the router needs of an exec or run_code request: its
// own timeout and whether it streams (read from the decoded request, not
// decoded a second time).
func execBounds(r events.Request) (b struct {
	TimeoutMS int64
	Stream    bool
}) {
	switch r := r.(type) {
	case *events.ExecRequest:
		b.TimeoutMS, b.Stream = r.TimeoutMS, r.Stream
	case *events.RunCodeRequest:
		b.TimeoutMS = r.TimeoutMS
	}
	return b
}
