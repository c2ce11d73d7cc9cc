package modalfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	tcr "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/taskcommandrouter"
)

// TB is the part of testing.TB the fake needs; *testing.T satisfies it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Options configure a Server.
type Options struct {
	// TB, when set, fails the test at cleanup on any deviation or leak and
	// closes the server then.
	TB TB
	// Logger receives the fake's logs; discarded when nil.
	Logger *slog.Logger
	// Dir holds the sandboxes' directories (default TB.TempDir or a new
	// temporary directory removed by Close).
	Dir string
	// Environment is the Modal environment the fake serves (default "main").
	Environment string
	// PageSize bounds a SandboxList page (default 50).
	PageSize int
	// DeferBuilds makes ImageGetOrCreate answer without a result, so that
	// clients must follow ImageJoinStreaming.
	DeferBuilds bool
	// ScheduleDelay keeps a new sandbox's task unscheduled (SandboxGetTaskId
	// answers without task_id) for this long.
	ScheduleDelay time.Duration
	// RouterStartDelay keeps a task's router unreachable (UNAVAILABLE on
	// every router call for it) for this long after the task is scheduled,
	// as a sandbox whose container is still starting on its worker.
	RouterStartDelay time.Duration
}

// Server is a fake Modal. Create it with New and Start it.
type Server struct {
	opts Options
	log  *slog.Logger

	tokenID, tokenSecret string
	control, router      *grpc.Server
	controlLn, routerLn  net.Listener
	dir                  string
	ownDir               bool
	wg                   sync.WaitGroup

	mu          sync.Mutex
	apps        map[string]*app // by id
	appByName   map[string]string
	images      map[string]bool
	secrets     map[string]map[string]string
	sandboxes   map[string]*sandbox // by id
	tasks       map[string]*sandbox // by task id
	authTokens  map[string]time.Time
	routerGen   int
	deviations  []string
	calls       map[string]int
	faults      faults
	closed      bool
	environment string
	idemKeys    map[string]bool // x-idempotency-key values seen on first attempts
}

type faults struct {
	rejectTokens    bool
	createDelay     time.Duration
	throttle        map[string]throttleFault
	fail            map[string]failFault
	routerFail      map[string]failFault
	breakStdio      int // streams to break
	breakStdioAfter int // bytes sent before the break
	breakStdinEnd   int // stdin streams to break after end
}

type failFault struct {
	n     int
	code  codes.Code
	after bool // apply the call, then fail (the answer is lost)
}

type throttleFault struct {
	n          int
	retryAfter time.Duration
}

type app struct{ id, name, env string }

// New returns a Server; call Start.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Environment == "" {
		opts.Environment = "main"
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 50
	}
	s := &Server{
		opts: opts, log: opts.Logger.With("component", "modalfake"),
		tokenID: "ak-" + randAlnum(22), tokenSecret: "as-" + randAlnum(22),
		apps: map[string]*app{}, appByName: map[string]string{}, images: map[string]bool{}, secrets: map[string]map[string]string{},
		sandboxes: map[string]*sandbox{}, tasks: map[string]*sandbox{}, authTokens: map[string]time.Time{},
		calls: map[string]int{}, environment: opts.Environment,
	}
	s.faults.throttle = map[string]throttleFault{}
	s.faults.fail = map[string]failFault{}
	s.faults.routerFail = map[string]failFault{}
	s.idemKeys = map[string]bool{}
	return s
}

// Start listens on two loopback ports (control plane and router). With
// Options.TB set, the server is closed and checked at the test's cleanup.
func (s *Server) Start() {
	s.dir = s.opts.Dir
	if s.dir == "" {
		if s.opts.TB != nil {
			s.dir = s.opts.TB.TempDir()
		} else {
			d, err := os.MkdirTemp("", "modalfake-")
			if err != nil {
				panic(err)
			}
			s.dir, s.ownDir = d, true
		}
	}
	var err error
	if s.controlLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		panic(err)
	}
	if s.routerLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		panic(err)
	}
	s.control = grpc.NewServer(grpc.ChainUnaryInterceptor(s.controlUnary), grpc.ChainStreamInterceptor(s.controlStream))
	pb.RegisterModalClientServer(s.control, &controlServer{s: s})
	s.router = grpc.NewServer(grpc.ChainUnaryInterceptor(s.routerUnary), grpc.ChainStreamInterceptor(s.routerStream))
	tcr.RegisterTaskCommandRouterServer(s.router, &routerServer{s: s})
	for _, p := range []struct {
		srv *grpc.Server
		ln  net.Listener
	}{{s.control, s.controlLn}, {s.router, s.routerLn}} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = p.srv.Serve(p.ln)
		}()
	}
	if s.opts.TB != nil {
		tb := s.opts.TB
		tb.Cleanup(func() {
			s.checkLeaks(tb)
			s.Close()
			for _, d := range s.Deviations() {
				tb.Errorf("modalfake: protocol deviation: %s", d)
			}
		})
	}
}

// URL is the control plane's URL (plaintext h2c, as MODAL_SERVER_URL).
func (s *Server) URL() string { return "http://" + s.controlLn.Addr().String() }

// RouterURL is what TaskGetCommandRouterAccess hands out: https:// on a
// plaintext listener, as Modal's Go SDK expects from a localhost server.
func (s *Server) RouterURL() string { return "https://" + s.routerLn.Addr().String() }

// Env is the environment a Modal SDK needs to talk to the fake.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"MODAL_SERVER_URL": s.URL(), "MODAL_TOKEN_ID": s.tokenID, "MODAL_TOKEN_SECRET": s.tokenSecret,
		"MODAL_ENVIRONMENT": s.environment, "MODAL_CONFIG_PATH": "/nonexistent/modal.toml",
	}
}

// Token returns the token id and secret the fake accepts.
func (s *Server) Token() (id, secret string) { return s.tokenID, s.tokenSecret }

// Close terminates every sandbox, waits for their processes and stops the
// servers.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	var running []*sandbox
	for _, sb := range s.sandboxes {
		running = append(running, sb)
	}
	s.mu.Unlock()
	for _, sb := range running {
		s.finish(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, -1, "fake closed")
	}
	for _, sb := range running {
		sb.waitProcs(10 * time.Second)
	}
	stopped := make(chan struct{})
	go func() {
		s.control.GracefulStop()
		s.router.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		s.control.Stop()
		s.router.Stop()
	}
	s.wg.Wait()
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// checkLeaks reports sandboxes left running and processes left alive.
func (s *Server) checkLeaks(tb TB) {
	s.mu.Lock()
	var left []string
	var all []*sandbox
	for id, sb := range s.sandboxes {
		all = append(all, sb)
		if sb.result == nil {
			left = append(left, id)
		}
	}
	s.mu.Unlock()
	sort.Strings(left)
	if len(left) > 0 {
		tb.Errorf("modalfake: leak: sandboxes still running at cleanup: %v", left)
	}
	for _, sb := range all {
		if sb.running() {
			continue
		}
		if alive := sb.waitProcs(10 * time.Second); len(alive) > 0 {
			tb.Errorf("modalfake: leak: processes of finished sandbox %s still alive: %v", sb.id, alive)
		}
	}
}

// deviate records a protocol deviation by the client.
func (s *Server) deviate(format string, args ...any) {
	d := fmt.Sprintf(format, args...)
	s.log.Warn("protocol deviation", "deviation", d)
	s.mu.Lock()
	s.deviations = append(s.deviations, d)
	s.mu.Unlock()
}

// Deviations returns the deviations recorded so far.
func (s *Server) Deviations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deviations...)
}

// TakeDeviations returns the deviations recorded so far and forgets them
// (for tests that provoke deviations on purpose).
func (s *Server) TakeDeviations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deviations
	s.deviations = nil
	return d
}

// Calls returns how many times a method (e.g. "SandboxCreate",
// "TaskExecStdioRead") was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Server) count(fullMethod string) string {
	m := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	s.mu.Lock()
	s.calls[m]++
	s.mu.Unlock()
	return m
}

// ---- fault injection ----

// RejectTokens makes every control-plane call fail with UNAUTHENTICATED, as
// Modal does for a revoked or wrong token.
func (s *Server) RejectTokens(on bool) {
	s.mu.Lock()
	s.faults.rejectTokens = on
	s.mu.Unlock()
}

// SetCreateDelay makes SandboxCreate take d before it answers. The sandbox
// is created even if the client gave up meanwhile (as a real server would).
func (s *Server) SetCreateDelay(d time.Duration) {
	s.mu.Lock()
	s.faults.createDelay = d
	s.mu.Unlock()
}

// Throttle makes the next n calls of method fail with RESOURCE_EXHAUSTED
// carrying an RPCRetryPolicy{retry_after_secs}.
func (s *Server) Throttle(method string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	s.faults.throttle[method] = throttleFault{n: n, retryAfter: retryAfter}
	s.mu.Unlock()
}

// FailCalls makes the next n calls of a control-plane method fail with
// code (e.g. codes.Unavailable) before they do anything.
func (s *Server) FailCalls(method string, n int, code codes.Code) {
	s.mu.Lock()
	s.faults.fail[method] = failFault{n: n, code: code}
	s.mu.Unlock()
}

// FailRouterCalls makes the next n calls of a unary router method (e.g.
// "TaskExecStdinWrite") fail with code; with afterApply the call takes
// effect first and only its answer is lost, so the client's retry must be
// idempotent.
func (s *Server) FailRouterCalls(method string, n int, code codes.Code, afterApply bool) {
	s.mu.Lock()
	s.faults.routerFail[method] = failFault{n: n, code: code, after: afterApply}
	s.mu.Unlock()
}

// BreakStdio makes the next n TaskExecStdioRead streams fail with
// UNAVAILABLE after sending afterBytes bytes (mid-chunk).
func (s *Server) BreakStdio(n, afterBytes int) {
	s.mu.Lock()
	s.faults.breakStdio, s.faults.breakStdioAfter = n, afterBytes
	s.mu.Unlock()
}

// BreakStdinStreams makes the next n TaskExecStdinWriteStream calls fail
// with UNAVAILABLE after their end message was applied (the answer is lost).
func (s *Server) BreakStdinStreams(n int) {
	s.mu.Lock()
	s.faults.breakStdinEnd = n
	s.mu.Unlock()
}

// RotateRouterKey invalidates every router JWT handed out so far: the next
// router call with one fails with UNAUTHENTICATED until the client fetches
// new access.
func (s *Server) RotateRouterKey() {
	s.mu.Lock()
	s.routerGen++
	s.mu.Unlock()
}

// Expire ends a sandbox's lifetime now (status TIMEOUT), killing its
// processes, as when its timeout_secs elapses.
func (s *Server) Expire(sandboxID string) bool {
	s.mu.Lock()
	sb := s.sandboxes[sandboxID]
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, 124, "sandbox timed out")
	return true
}

// ---- inspection ----

// SandboxIDs lists the running sandboxes.
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if sb.result == nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// SandboxInfo is what the fake knows of a sandbox, for tests.
type SandboxInfo struct {
	ID, AppID, ImageID, TaskID, Name string
	Tags                             map[string]string
	TimeoutSecs                      uint32
	Network                          *pb.NetworkAccess
	Resources                        *pb.Resources
	SecretKeys                       []string
	Dir                              string
	// HostAddr is the host's address as an ALLOWLIST sandbox reaches it
	// (in HostNet; empty for other policies or where they are not enforced).
	HostAddr string
	Running  bool
	Status   pb.GenericResult_GenericStatus
}

// Sandbox describes one sandbox.
func (s *Server) Sandbox(id string) (SandboxInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return SandboxInfo{}, false
	}
	info := SandboxInfo{ID: sb.id, AppID: sb.appID, ImageID: sb.def.GetImageId(), TaskID: sb.taskID, Name: sb.def.GetName(),
		Tags: map[string]string{}, TimeoutSecs: sb.def.GetTimeoutSecs(), Network: sb.def.GetNetworkAccess(), Resources: sb.def.GetResources(),
		Dir: sb.root, HostAddr: sb.net.addr(), Running: sb.result == nil}
	for _, t := range sb.tags {
		info.Tags[t.GetTagName()] = t.GetTagValue()
	}
	for k := range sb.env {
		info.SecretKeys = append(info.SecretKeys, k)
	}
	sort.Strings(info.SecretKeys)
	if sb.result != nil {
		info.Status = sb.result.GetStatus()
	}
	return info, true
}

// SandboxByTag finds the sandbox carrying tag=value.
func (s *Server) SandboxByTag(tag, value string) (SandboxInfo, bool) {
	s.mu.Lock()
	var id string
	for _, sb := range s.sandboxes {
		for _, t := range sb.tags {
			if t.GetTagName() == tag && t.GetTagValue() == value {
				id = sb.id
			}
		}
	}
	s.mu.Unlock()
	if id == "" {
		return SandboxInfo{}, false
	}
	return s.Sandbox(id)
}

// RunningProcesses counts the processes alive in running sandboxes.
func (s *Server) RunningProcesses() int {
	s.mu.Lock()
	var all []*sandbox
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	n := 0
	for _, sb := range all {
		n += len(sb.aliveProcs())
	}
	return n
}

// ---- ids and tokens ----

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func randAlnum(n int) string {
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(base62))))
		b[i] = base62[k.Int64()]
	}
	return string(b)
}

func makeJWT(claims map[string]any) string {
	payload, _ := json.Marshal(claims)
	return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(payload) + "." + randAlnum(16)
}

func parseJWT(tok string) (map[string]any, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, false
	}
	m := map[string]any{}
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}
