package modalfake

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
)

// Id shapes (reference §2.4).
var (
	reAppID     = regexp.MustCompile(`^ap-[a-zA-Z0-9]{22}$`)
	reSandboxV1 = regexp.MustCompile(`^sb-[0-9A-Za-z]{22}$`)
	reTaskID    = regexp.MustCompile(`^ta-[0-9A-Za-z]{22}$`)
	reImageID   = regexp.MustCompile(`^im-[0-9A-Za-z]{22}$`)
	reUUID4     = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	reName      = regexp.MustCompile(`^[a-zA-Z0-9\-_.]{1,64}$`)
	reTag       = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,63}$`)
)

// unknownFields reports the first message in m (recursively) that carries
// fields this protocol does not define.
func unknownFields(m protoreflect.Message) (string, bool) {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().FullName()), true
	}
	var where string
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				where, found = unknownFields(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				where, found = unknownFields(mv.Message())
				return !found
			})
		case fd.Message() != nil && !fd.IsMap() && !fd.IsList():
			where, found = unknownFields(v.Message())
		}
		return !found
	})
	return where, found
}

func (s *Server) checkUnknown(method string, req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if where, bad := unknownFields(m.ProtoReflect()); bad {
		s.deviate("%s: request has unknown fields in %s", method, where)
		return status.Errorf(codes.InvalidArgument, "unknown fields in %s", where)
	}
	return nil
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// checkControlHeaders validates what every control-plane call must carry.
func (s *Server) checkControlHeaders(ctx context.Context, method string, unary bool) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := first(md, "x-modal-client-type"); v == "" {
		s.deviate("%s: no x-modal-client-type header", method)
		return status.Error(codes.FailedPrecondition, "missing x-modal-client-type")
	} else if _, err := strconv.Atoi(v); err != nil {
		s.deviate("%s: x-modal-client-type %q is not a number", method, v)
		return status.Error(codes.FailedPrecondition, "bad x-modal-client-type")
	}
	if first(md, "x-modal-client-version") == "" {
		s.deviate("%s: no x-modal-client-version header", method)
		return status.Error(codes.FailedPrecondition, "missing x-modal-client-version")
	}
	id, secret := first(md, "x-modal-token-id"), first(md, "x-modal-token-secret")
	if id == "" || secret == "" {
		s.deviate("%s: no x-modal-token-id / x-modal-token-secret", method)
		return status.Error(codes.Unauthenticated, "Token missing. Could not authenticate client.")
	}
	s.mu.Lock()
	reject := s.faults.rejectTokens
	s.mu.Unlock()
	if reject || id != s.tokenID || secret != s.tokenSecret {
		return status.Error(codes.Unauthenticated, "failed authentication")
	}
	if !unary {
		return nil
	}
	key := first(md, "x-idempotency-key")
	if !reUUID4.MatchString(key) {
		s.deviate("%s: x-idempotency-key %q is not a UUIDv4", method, key)
	}
	attempt, throttle := 0, 0
	if a := first(md, "x-retry-attempt"); a != "" {
		var err error
		if attempt, err = strconv.Atoi(a); err != nil {
			s.deviate("%s: x-retry-attempt %q is not a number", method, a)
		}
	}
	if a := first(md, "x-throttle-retry-attempt"); a != "" {
		throttle, _ = strconv.Atoi(a)
	}
	s.mu.Lock()
	seen := s.idemKeys[key]
	if attempt == 0 && throttle == 0 {
		if len(s.idemKeys) > 100000 {
			s.idemKeys = map[string]bool{}
		}
		s.idemKeys[key] = true
	}
	s.mu.Unlock()
	if (attempt > 0 || throttle > 0) && !seen {
		s.deviate("%s: a retry (attempt %d, throttle %d) with an x-idempotency-key no first attempt used: retries must reuse the key", method, attempt, throttle)
	}
	if attempt > 0 && first(md, "x-retry-delay") == "" {
		s.deviate("%s: retry attempt %d without x-retry-delay", method, attempt)
	}
	if method == "AuthTokenGet" {
		return nil
	}
	tok := first(md, "x-modal-auth-token")
	if tok == "" {
		s.deviate("%s: no x-modal-auth-token", method)
		return status.Error(codes.Unauthenticated, "missing auth token")
	}
	s.mu.Lock()
	exp, ok := s.authTokens[tok]
	s.mu.Unlock()
	if !ok {
		s.deviate("%s: x-modal-auth-token was not issued by AuthTokenGet", method)
		return status.Error(codes.Unauthenticated, "invalid auth token")
	}
	if time.Now().After(exp) {
		return status.Error(codes.Unauthenticated, "auth token expired")
	}
	return nil
}

// throttled applies an injected RESOURCE_EXHAUSTED fault.
func (s *Server) throttled(method string) error {
	s.mu.Lock()
	if f := s.faults.fail[method]; f.n > 0 {
		f.n--
		s.faults.fail[method] = f
		s.mu.Unlock()
		return status.Errorf(f.code, "modalfake: injected %s", f.code)
	}
	f := s.faults.throttle[method]
	if f.n <= 0 {
		s.mu.Unlock()
		return nil
	}
	f.n--
	s.faults.throttle[method] = f
	s.mu.Unlock()
	return retryPolicyError(f.retryAfter)
}

func retryPolicyError(after time.Duration) error {
	st := status.New(codes.ResourceExhausted, "Sandbox creation rate limit exceeded")
	a, err := anypb.New(&pb.RPCRetryPolicy{RetryAfterSecs: float32(after.Seconds())})
	if err != nil {
		return st.Err()
	}
	a.TypeUrl = "type.modal.com/" + strings.TrimPrefix(a.TypeUrl, "type.googleapis.com/")
	sp := st.Proto()
	sp.Details = append(sp.Details, a)
	return status.FromProto(sp).Err()
}

func (s *Server) controlUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := s.count(info.FullMethod)
	if err := s.checkControlHeaders(ctx, method, true); err != nil {
		return nil, err
	}
	if err := s.checkUnknown(method, req); err != nil {
		return nil, err
	}
	if err := s.throttled(method); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) controlStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := s.count(info.FullMethod)
	if err := s.checkControlHeaders(ss.Context(), method, false); err != nil {
		return err
	}
	return handler(srv, &checkedStream{ServerStream: ss, s: s, method: method})
}

// checkedStream validates every message a client streams in.
type checkedStream struct {
	grpc.ServerStream
	s      *Server
	method string
}

func (c *checkedStream) RecvMsg(m any) error {
	if err := c.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return c.s.checkUnknown(c.method, m)
}

// checkRouterAuth validates the router's only header: a current JWT for
// the task. It returns the task id the JWT was issued for.
func (s *Server) checkRouterAuth(ctx context.Context, method string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if first(md, "x-modal-token-secret") != "" || first(md, "x-modal-token-id") != "" {
		s.deviate("%s: the Modal token was sent to the router (only authorization: Bearer belongs there)", method)
	}
	auth := first(md, "authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" {
		s.deviate("%s: router call without authorization: Bearer", method)
		return "", status.Error(codes.Unauthenticated, "missing authorization")
	}
	claims, ok := parseJWT(tok)
	if !ok {
		s.deviate("%s: authorization is not a JWT", method)
		return "", status.Error(codes.Unauthenticated, "malformed jwt")
	}
	gen, _ := claims["gen"].(float64)
	exp, _ := claims["exp"].(float64)
	task, _ := claims["task_id"].(string)
	s.mu.Lock()
	cur := s.routerGen
	s.mu.Unlock()
	if int(gen) != cur || time.Now().Unix() > int64(exp) {
		return "", status.Error(codes.Unauthenticated, "jwt expired or revoked")
	}
	return task, nil
}

// routerStarted answers UNAVAILABLE while a task's router is still
// starting (Options.RouterStartDelay).
func (s *Server) routerStarted(taskID string) error {
	if s.opts.RouterStartDelay <= 0 {
		return nil
	}
	s.mu.Lock()
	sb := s.tasks[taskID]
	s.mu.Unlock()
	if sb != nil && time.Now().Before(sb.scheduledAt.Add(s.opts.RouterStartDelay)) {
		return status.Error(codes.Unavailable, "modalfake: the task's router is not up yet")
	}
	return nil
}

type taskKey struct{}

func (s *Server) routerUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := s.count(info.FullMethod)
	task, err := s.checkRouterAuth(ctx, method)
	if err != nil {
		return nil, err
	}
	if err := s.routerStarted(task); err != nil {
		return nil, err
	}
	if err := s.checkUnknown(method, req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	f, fire := s.faults.routerFail[method], false
	if f.n > 0 {
		f.n--
		s.faults.routerFail[method] = f
		fire = true
	}
	s.mu.Unlock()
	if fire && !f.after {
		return nil, status.Errorf(f.code, "modalfake: injected %s", f.code)
	}
	resp, err := handler(context.WithValue(ctx, taskKey{}, task), req)
	if fire && f.after && err == nil {
		return nil, status.Errorf(f.code, "modalfake: injected %s after the call took effect", f.code)
	}
	return resp, err
}

func (s *Server) routerStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := s.count(info.FullMethod)
	task, err := s.checkRouterAuth(ss.Context(), method)
	if err != nil {
		return err
	}
	if err := s.routerStarted(task); err != nil {
		return err
	}
	return handler(srv, &checkedStream{ServerStream: &ctxStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), taskKey{}, task)}, s: s, method: method})
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }
