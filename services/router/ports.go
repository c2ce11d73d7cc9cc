package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Published ports (ports.expose, ports.list, ports.unexpose, ports.token).
//
// The router checks a request (the caller's tenancy, the sandbox's state
// and capabilities, reserved ports, the bound) and mints a private port's
// token; the worker that owns the sandbox changes the registry record
// (Sandbox.Ports), as it makes every other write of that record, and
// records the operation on SBX_OPS with its signing key. The router cannot
// do either itself: its own registry write would race the worker's
// revision-checked writes of its copy of the record, and it may not
// publish records. The token never leaves the router except in the reply
// that minted it; the worker sees only its hash (portauth.Hash), which is
// all the registry keeps. The hash checks a token and nothing more: signed
// links are keyed by the port link key (Config.PortLinkKey), which only the
// routers and the gateways hold.

// ErrGatewayConfig is a malformed Config.GatewayURL, GatewayDomain,
// ReservedPorts or PortLinkKey.
var ErrGatewayConfig = errors.New("router: gateway configuration")

// checkGatewayConfig validates the ports fields of a Config.
func checkGatewayConfig(c Config) error {
	if c.GatewayURL != "" {
		u, err := url.Parse(c.GatewayURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%w: gateway URL %q is not an http(s) base URL", ErrGatewayConfig, c.GatewayURL)
		}
	}
	if c.GatewayDomain != "" && !validDomain(c.GatewayDomain) {
		return fmt.Errorf("%w: gateway domain %q is not a DNS name", ErrGatewayConfig, c.GatewayDomain)
	}
	if len(c.PortLinkKey) != 0 && len(c.PortLinkKey) != portauth.KeySize {
		return fmt.Errorf("%w: a port link key has %d bytes, not %d", ErrGatewayConfig, portauth.KeySize, len(c.PortLinkKey))
	}
	for _, p := range c.ReservedPorts {
		if p < events.MinPort || p > events.MaxPort {
			return fmt.Errorf("%w: reserved port %d is out of range %d..%d", ErrGatewayConfig, p, events.MinPort, events.MaxPort)
		}
	}
	return nil
}

func validDomain(d string) bool {
	if len(d) > 253 || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ParsePorts reads a comma-separated list of ports ("8080,9000"; empty:
// none), for the --reserved-ports flag.
func ParsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < events.MinPort || p > events.MaxPort {
			return nil, fmt.Errorf("%w: %q is not a port (%d..%d)", ErrGatewayConfig, f, events.MinPort, events.MaxPort)
		}
		out = append(out, p)
	}
	return out, nil
}

// reservedPorts are the ports no sandbox may publish: the operator's and
// the sandbox agent's own, sorted.
func (s *Service) reservedPorts() []int {
	out := slices.Clone(s.cfg.ReservedPorts)
	out = append(out, agentPorts...)
	slices.Sort(out)
	return slices.Compact(out)
}

// portURLs are a published port's addresses at the gateway: host-routed
// (scheme://<port>-<sandbox>.<domain>[:port]/, when a domain is
// configured) and path-routed (<gateway URL>/sandboxes/<sandbox>/ports/<port>/,
// when a gateway URL is).
func (s *Service) portURLs(id string, port int) (hostURL, pathURL string) {
	p := strconv.Itoa(port)
	scheme, hostPort := "http", ""
	if s.cfg.GatewayURL != "" {
		u, _ := url.Parse(s.cfg.GatewayURL) // checked by New
		scheme, hostPort = u.Scheme, u.Port()
		pathURL = strings.TrimRight(s.cfg.GatewayURL, "/") + "/sandboxes/" + id + "/ports/" + p + "/"
	}
	if s.cfg.GatewayDomain != "" {
		host := p + "-" + id + "." + s.cfg.GatewayDomain
		if hostPort != "" {
			host = net.JoinHostPort(host, hostPort)
		}
		hostURL = scheme + "://" + host + "/"
	}
	return hostURL, pathURL
}

// portInfo is what a tenant sees of a published port (no token).
func (s *Service) portInfo(id string, p events.PortExposure) events.PortInfo {
	u, pu := s.portURLs(id, p.Port)
	return events.PortInfo{SandboxID: id, Port: p.Port, Access: p.Access, URL: u, PathURL: pu, ExposedAt: p.ExposedAt}
}

// withLink adds a signed link to info, valid for ttl, made with the port
// link key over the port's token hash: the port's host-routed URL with
// ?sbx_link=…. A link is made for host routing only (on a path route the
// gateway takes the token header alone: every sandbox shares its origin
// there), so without a gateway domain, or without a port link key, there
// is none: the error says why.
func (s *Service) withLink(info events.PortInfo, tokenHash string, ttl time.Duration) (events.PortInfo, *events.Error) {
	if info.URL == "" {
		return info, linkUnavailable(info, "the router has no gateway domain: links work with host routing only")
	}
	exp := time.Now().Add(ttl).UTC().Truncate(time.Second)
	v, err := portauth.Sign(s.cfg.PortLinkKey, tokenHash, portauth.PurposeLink, info.SandboxID, info.Port, exp)
	if err != nil {
		return info, linkUnavailable(info, "the router has no port link key")
	}
	info.Link = info.URL + "?" + events.PortLinkParam + "=" + url.QueryEscape(v)
	info.LinkExpires = &exp
	return info, nil
}

func linkUnavailable(info events.PortInfo, why string) *events.Error {
	return events.Errorf(events.CodePortLinkUnavailable, "no signed link for port %d of sandbox %s: %s; send the token in the %s header",
		info.Port, info.SandboxID, why, events.PortTokenHeader).With("sandbox_id", info.SandboxID).With("port", info.Port)
}

func linkTTL(s int) time.Duration {
	if s <= 0 {
		return events.DefaultPortLinkTTL
	}
	return min(time.Duration(s)*time.Second, events.MaxPortLinkTTL)
}

// tenantView is a record as a caller may see it (get, list): no token
// hash; no ports once the sandbox has ended (they went with it).
func tenantView(sb events.Sandbox) events.Sandbox {
	if sb.State.Ended() {
		sb.Ports = nil
		return sb
	}
	return sb.WithoutTokenHashes()
}

func findPort(ports []events.PortExposure, port int) (events.PortExposure, bool) {
	for _, p := range ports {
		if p.Port == port {
			return p, true
		}
	}
	return events.PortExposure{}, false
}

// ports serves the four ports ops.
func (s *Service) ports(req micro.Request, c caller, r events.Request, traceparent string) {
	switch r := r.(type) {
	case *events.PortsExposeRequest:
		if r.TokenHash != "" {
			respondError(req, routerOnly())
			return
		}
		s.async2(req, func(ctx context.Context, to string) *events.Error { return s.portsExpose(ctx, to, c, r, traceparent) })
	case *events.PortsTokenRequest:
		if r.TokenHash != "" {
			respondError(req, routerOnly())
			return
		}
		s.async2(req, func(ctx context.Context, to string) *events.Error { return s.portsToken(ctx, to, c, r, traceparent) })
	case *events.PortsUnexposeRequest:
		s.async2(req, func(ctx context.Context, to string) *events.Error { return s.portsUnexpose(ctx, to, c, r, traceparent) })
	case *events.PortsListRequest:
		s.async(req, func(ctx context.Context) (any, *events.Error) { return s.portsList(ctx, c, r) })
	}
}

func routerOnly() *events.Error {
	return events.Errorf(events.CodeInvalidValue, "token_hash: set by the router only").With("field", "token_hash")
}

// async2 runs f off the handler goroutine; f answers the client itself
// (directly or through a worker's reply), or returns the error to answer.
func (s *Service) async2(req micro.Request, f func(ctx context.Context, to string) *events.Error) {
	to := req.Reply()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := s.workCtx(10 * time.Second)
		defer cancel()
		if e := f(ctx, to); e != nil {
			s.publishReply(to, nil, e)
		}
	}()
}

// portTarget finds the sandbox a ports request addresses, as every other
// op does (a foreign or unknown sandbox answers the same), reading the
// bucket itself: a port just published or a token just rotated must show.
// Only a running sandbox's ports change.
func (s *Service) portTarget(ctx context.Context, c caller, id string) (events.Sandbox, *events.Error) {
	sb, ok, err := s.readSandbox(ctx, id)
	if err != nil {
		return events.Sandbox{}, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
	}
	sb, e := checkOwner(c, id, sb, ok)
	if e != nil {
		return sb, e
	}
	switch {
	case sb.State.Ended():
		return sb, events.Errorf(events.CodeSandboxGone, "sandbox %s is %s: %s", sb.SandboxID, sb.State, sb.EndReason).With("sandbox_id", sb.SandboxID)
	case sb.State == events.StatePaused:
		return sb, events.Errorf(events.CodeSandboxPaused, "sandbox %s is paused: resume it to publish or change its ports", sb.SandboxID).With("sandbox_id", sb.SandboxID)
	case sb.State == events.StateCreating:
		return sb, events.Errorf(events.CodeSandboxBusy, "sandbox %s is being created", sb.SandboxID).With("sandbox_id", sb.SandboxID)
	}
	return sb, nil
}

// checkExpose checks what the router can of an expose: the backend, the
// reserved ports and the bound (the owning worker checks the bound again,
// as the one writer of the record).
func (s *Service) checkExpose(sb events.Sandbox, port int) *events.Error {
	if !sb.Capabilities.Has(events.CapPorts) {
		return events.Errorf(events.CodeCapabilityNotSupp, "backend %q cannot publish a sandbox's ports", sb.Backend).
			With("missing", []events.Capability{events.CapPorts}).With("sandbox_id", sb.SandboxID)
	}
	if reserved := s.reservedPorts(); slices.Contains(reserved, port) {
		return events.Errorf(events.CodePortReserved, "port %d is reserved", port).With("port", port).With("reserved", reserved)
	}
	if _, ok := findPort(sb.Ports, port); !ok && len(sb.Ports) >= events.MaxExposedPorts {
		return tooManyPorts(sb.SandboxID)
	}
	return nil
}

func tooManyPorts(id string) *events.Error {
	return events.Errorf(events.CodeTooManyPorts, "sandbox %s publishes %d ports already", id, events.MaxExposedPorts).
		With("max", events.MaxExposedPorts).With("sandbox_id", id)
}

func (s *Service) portsExpose(ctx context.Context, to string, c caller, r *events.PortsExposeRequest, traceparent string) *events.Error {
	sb, e := s.portTarget(ctx, c, r.SandboxID)
	if e != nil {
		return e
	}
	if e := s.checkExpose(sb, r.Port); e != nil {
		return e
	}
	cmd := *r
	cmd.Access = r.Access.Effective()
	var token string
	if cmd.Access == events.PortPrivate {
		var err error
		if token, err = portauth.NewToken(); err != nil {
			return events.Errorf(events.CodeInternal, "token: %v", err)
		}
		cmd.TokenHash = portauth.Hash(token)
	}
	return s.forwardPorts(ctx, to, c, events.OpPortsExpose, sb, &cmd, traceparent, func(rep events.PortsCommandReply) (any, *events.Error) {
		info := s.portInfo(sb.SandboxID, events.PortExposure{Port: rep.Port, Access: rep.Access, ExposedAt: rep.ExposedAt})
		if rep.TokenSet {
			info.Token = token
		}
		return info, nil
	})
}

func (s *Service) portsUnexpose(ctx context.Context, to string, c caller, r *events.PortsUnexposeRequest, traceparent string) *events.Error {
	sb, e := s.portTarget(ctx, c, r.SandboxID)
	if e != nil {
		return e
	}
	return s.forwardPorts(ctx, to, c, events.OpPortsUnexpose, sb, r, traceparent, func(rep events.PortsCommandReply) (any, *events.Error) {
		return events.PortsUnexposeReply{SandboxID: sb.SandboxID, Port: r.Port, WasExposed: rep.Exposed}, nil
	})
}

func (s *Service) portsToken(ctx context.Context, to string, c caller, r *events.PortsTokenRequest, traceparent string) *events.Error {
	sb, e := s.portTarget(ctx, c, r.SandboxID)
	if e != nil {
		return e
	}
	p, ok := findPort(sb.Ports, r.Port)
	switch {
	case !ok && !r.Rotate:
		return notExposed(sb.SandboxID, r.Port)
	case ok && p.Access == events.PortPublic:
		return publicPort(sb.SandboxID, r.Port)
	}
	ttl := linkTTL(r.LinkTTLS)
	if !r.Rotate && p.TokenHash != "" {
		info, e := s.withLink(s.portInfo(sb.SandboxID, p), p.TokenHash, ttl)
		if e != nil {
			return e
		}
		return s.answer(to, info)
	}
	// A rotation (or a private port without a hash, which only a new
	// token can serve): the owning worker keeps the new hash.
	token, err := portauth.NewToken()
	if err != nil {
		return events.Errorf(events.CodeInternal, "token: %v", err)
	}
	cmd := *r
	cmd.Rotate, cmd.TokenHash = true, portauth.Hash(token)
	return s.forwardPorts(ctx, to, c, events.OpPortsToken, sb, &cmd, traceparent, func(rep events.PortsCommandReply) (any, *events.Error) {
		if !rep.TokenSet {
			return nil, events.Errorf(events.CodeInternal, "the worker kept no new token for port %d", r.Port)
		}
		info := s.portInfo(sb.SandboxID, events.PortExposure{Port: rep.Port, Access: rep.Access, ExposedAt: rep.ExposedAt})
		info.Token = token
		// The new token stands whether or not a link can be made: without
		// one (withLink's error) the reply carries the token alone.
		if linked, e := s.withLink(info, cmd.TokenHash, ttl); e == nil {
			info = linked
		}
		return info, nil
	})
}

func notExposed(id string, port int) *events.Error {
	return events.Errorf(events.CodePortNotExposed, "port %d of sandbox %s is not published", port, id).With("port", port).With("sandbox_id", id)
}

func publicPort(id string, port int) *events.Error {
	return events.Errorf(events.CodeInvalidValue, "port %d of sandbox %s is public: it has no token and needs no link", port, id).
		With("field", "port").With("sandbox_id", id)
}

// answer replies v to the client.
func (s *Service) answer(to string, v any) *events.Error {
	b, err := json.Marshal(v)
	if err != nil {
		return events.Errorf(events.CodeInternal, "encode reply: %v", err)
	}
	s.publishReply(to, b, nil)
	return nil
}

func (s *Service) portsList(ctx context.Context, c caller, r *events.PortsListRequest) (any, *events.Error) {
	sb, ok, err := s.readSandbox(ctx, r.SandboxID)
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
	}
	sb, e := checkOwner(c, r.SandboxID, sb, ok)
	if e != nil {
		return nil, e
	}
	out := events.PortsListReply{Ports: []events.PortInfo{}}
	for _, p := range tenantView(sb).Ports {
		out.Ports = append(out.Ports, s.portInfo(sb.SandboxID, p))
	}
	slices.SortFunc(out.Ports, func(a, b events.PortInfo) int { return a.Port - b.Port })
	return out, nil
}

// forwardPorts sends a ports command to the worker that owns sb; reply
// turns the worker's PortsCommandReply into the client's answer.
func (s *Service) forwardPorts(ctx context.Context, to string, c caller, op string, sb events.Sandbox, cmd events.Request,
	traceparent string, reply func(events.PortsCommandReply) (any, *events.Error)) *events.Error {
	key := events.WorkerKey(sb.Backend, sb.Worker)
	if !s.liveLease(key) && !s.refreshLease(ctx, key) {
		return workerLost(op, sb.SandboxID)
	}
	data, err := json.Marshal(cmd)
	if err != nil {
		return events.Errorf(events.CodeInternal, "encode command: %v", err)
	}
	timeout, bounded := c.bound(s.cfg.RequestTimeout)
	p := &pending{tenant: c.quotaTenant(), callerBound: bounded}
	p.answer = func(msg *nats.Msg) {
		var rep events.PortsCommandReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			s.publishReply(p.reply, nil, events.Errorf(events.CodeInternal, "the worker's answer is malformed: %v", err))
			return
		}
		v, e := reply(rep)
		if e != nil {
			s.publishReply(p.reply, nil, e)
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			s.publishReply(p.reply, nil, events.Errorf(events.CodeInternal, "encode reply: %v", err))
			return
		}
		s.publishReply(p.reply, b, nil)
	}
	s.publishCommand(to, op, events.NodeSubject(sb.Backend, sb.Worker, events.Verb(op)), key, sb.SandboxID, events.NewID(), traceparent,
		json.RawMessage(data), timeout, p)
	return nil
}

// agentPorts are the sandbox agent's own ports, never published. The agent
// listens on no TCP port inside a sandbox (it speaks over the channel its
// worker opened), so there are none today; a backend whose agent listens
// inside the sandbox adds its ports here.
var agentPorts []int

// ---- create with ports ----

// redirected is a create request whose answers go to a router inbox
// (createWithPorts) instead of the client.
type redirected struct {
	micro.Request
	nc *nats.Conn
	to string
}

func (r redirected) Reply() string { return r.to }

func (r redirected) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := nats.NewMsg(r.to)
	m.Data = data
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

func (r redirected) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b, opts...)
}

func (r redirected) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	m := nats.NewMsg(r.to)
	m.Header.Set(events.HeaderServiceErrorCode, code)
	m.Header.Set(events.HeaderServiceError, description)
	m.Data = data
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

// createWithPorts creates the sandbox as create does, with its answer
// coming to a router inbox; once the sandbox runs, it publishes each of
// r.Ports (as ports.expose does) and answers the client with the create's
// reply and the ports, each private one's token shown there only. When a
// port cannot be published the sandbox is killed and the client gets that
// error (with details.sandbox_id): a create answers with all it asked for
// or with nothing left running.
func (s *Service) createWithPorts(req micro.Request, c caller, r *events.CreateRequest, traceparent string) {
	for _, p := range r.Ports {
		if reserved := s.reservedPorts(); slices.Contains(reserved, p.Port) {
			respondError(req, events.Errorf(events.CodePortReserved, "port %d is reserved", p.Port).With("port", p.Port).With("reserved", reserved))
			return
		}
	}
	to := req.Reply()
	inbox := s.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 1)
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		respondError(req, events.Errorf(events.CodeBackendUnavailable, "subscribe: %v", err))
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { _ = sub.Unsubscribe() }()
		// The create answers within its own bound (its timeout, which
		// kills what it made); the margin lets that answer come first.
		inner, _ := c.bound(s.cfg.CreateTimeout)
		wait := inner + 5*time.Second
		var msg *nats.Msg
		select {
		case msg = <-ch:
		case <-time.After(wait):
			s.publishReply(to, nil, events.Errorf(events.CodeCreateTimeout, "no worker finished the create within %s", s.cfg.CreateTimeout))
			return
		case <-s.runCtx.Done():
			s.publishReply(to, nil, events.Errorf(events.CodeBackendUnavailable, "router shutting down"))
			return
		}
		if msg.Header.Get(events.HeaderServiceErrorCode) != "" {
			s.relay(to, msg)
			return
		}
		var reply events.CreateReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil {
			s.publishReply(to, nil, events.Errorf(events.CodeInternal, "the create's answer is malformed: %v", err))
			return
		}
		for _, p := range r.Ports {
			info, e := s.exposeNow(c, &events.PortsExposeRequest{SandboxID: reply.SandboxID, Port: p.Port, Access: p.Access}, traceparent)
			if e != nil {
				s.killAbandoned(reply.SandboxID)
				s.publishReply(to, nil, e.With("sandbox_id", reply.SandboxID))
				return
			}
			reply.Ports = append(reply.Ports, info)
		}
		if e := s.answer(to, reply); e != nil {
			s.publishReply(to, nil, e)
		}
	}()
	s.create(redirected{Request: req, nc: s.nc, to: inbox}, c, r, traceparent)
}

// exposeNow publishes one port as ports.expose does and waits for the
// owning worker's answer.
func (s *Service) exposeNow(c caller, r *events.PortsExposeRequest, traceparent string) (events.PortInfo, *events.Error) {
	ctx, cancel := s.workCtx(s.cfg.RequestTimeout + 5*time.Second)
	defer cancel()
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return events.PortInfo{}, events.Errorf(events.CodeBackendUnavailable, "subscribe: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if e := s.portsExpose(ctx, inbox, c, r, traceparent); e != nil {
		return events.PortInfo{}, e
	}
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return events.PortInfo{}, events.Errorf(events.CodeWorkerTimeout, "the worker did not answer %s in time", events.OpPortsExpose)
	}
	if msg.Header.Get(events.HeaderServiceErrorCode) != "" {
		if e := events.DecodeError(msg.Data); e != nil {
			return events.PortInfo{}, e
		}
		return events.PortInfo{}, events.Errorf(events.CodeInternal, "a failed expose without an error body")
	}
	var info events.PortInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return events.PortInfo{}, events.Errorf(events.CodeInternal, "the expose's answer is malformed: %v", err)
	}
	return info, nil
}
