package e2bfake

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"sync"
	"time"
)

// DefaultAPIKey is the key the fake accepts unless Options.APIKey is set.
const DefaultAPIKey = "e2b_0000000000000000000000000000000000000000"

// EnvdVersion is the envd version the fake reports.
const EnvdVersion = "0.6.13"

// TB is the part of testing.TB the fake needs; *testing.T satisfies it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
}

// Options configures a Server. The zero value is usable.
type Options struct {
	// APIKey is the only key accepted (DefaultAPIKey when empty).
	APIKey string
	// Logger receives debug logs; discarded when nil.
	Logger *slog.Logger
	// TB, when set, fails the test at cleanup if any deviation was recorded
	// and closes the server (see FailOnDeviation).
	TB TB
	// Dir holds the sandboxes' temporary root directories (os.TempDir when empty).
	Dir string
	// MaxTimeout is the longest sandbox lifetime (default 1 h, the Hobby plan).
	MaxTimeout time.Duration
	// MaxSandboxes answers 429 to creates beyond this many live sandboxes
	// (default 20, E2B's default concurrency limit).
	MaxSandboxes int
	// ExitRetention is how long an exited process's end event stays available
	// to Connect (default 30 s, as envd).
	ExitRetention time.Duration
	// DefaultKeepalive is the keepalive interval when the request has no
	// Keepalive-Ping-Interval header (default 90 s, as envd).
	DefaultKeepalive time.Duration
	// InterpreterKeepalive is the /execute keepalive interval (default 5 s).
	InterpreterKeepalive time.Duration
	// Python is the python3 binary for the code interpreter ("python3" on PATH
	// when empty). Without it /execute answers 503.
	Python string
}

// Faults are injected failures. Data-plane faults apply to envd and the code
// interpreter; control-plane counters apply to API requests. A sandbox's
// faults (SetSandboxFaults) replace the server's data-plane faults for that
// sandbox and add their own counters for API calls that address it.
type Faults struct {
	// Delay delays every data-plane request (and API request) by this much.
	Delay time.Duration
	// BadGateway makes the proxy answer 502 "sandbox not found" to every
	// data-plane request, as if the sandbox were gone.
	BadGateway bool
	// DropStreamAfter aborts the TCP connection of a process, watch or
	// /execute stream after this many messages (0 = off).
	DropStreamAfter int
	// OmitEnd ends process streams cleanly (end-stream {}) without the end
	// event, and /execute streams without end_of_execution.
	OmitEnd bool
	// Stall stops a stream after its first message: nothing more is sent,
	// not even keepalives, until the client goes away.
	Stall bool
	// ExpireAfter expires the sandbox after this many messages of a stream
	// (0 = off): the stream's connection drops and envd answers 502.
	ExpireAfter int

	// RateLimit answers the next N API requests with 429.
	RateLimit int
	// RetryAfter is the Retry-After header value sent with those 429s.
	RetryAfter string
	// ServerErrors answers the next N API requests with 503.
	ServerErrors int
}

// Server is a fake E2B. Create it with New, then Start it.
type Server struct {
	opts Options
	log  *slog.Logger

	api  *httptest.Server
	data *httptest.Server

	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	faults     Faults
	deviations []string
	creates    []json.RawMessage
	closed     bool
	python     string
}

// New returns an unstarted Server.
func New(opts Options) *Server {
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = time.Hour
	}
	if opts.MaxSandboxes <= 0 {
		opts.MaxSandboxes = 20
	}
	if opts.ExitRetention <= 0 {
		opts.ExitRetention = 30 * time.Second
	}
	if opts.DefaultKeepalive <= 0 {
		opts.DefaultKeepalive = 90 * time.Second
	}
	if opts.InterpreterKeepalive <= 0 {
		opts.InterpreterKeepalive = 5 * time.Second
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: lg, sandboxes: map[string]*sandbox{}}
	s.python = opts.Python
	if s.python == "" {
		if p, err := exec.LookPath("python3"); err == nil {
			s.python = p
		}
	}
	s.api = httptest.NewUnstartedServer(http.HandlerFunc(s.serveAPI))
	s.data = httptest.NewUnstartedServer(http.HandlerFunc(s.serveData))
	if opts.TB != nil {
		s.FailOnDeviation(opts.TB)
		opts.TB.Cleanup(s.Close)
	}
	return s
}

// Start starts both listeners on 127.0.0.1.
func (s *Server) Start() {
	s.api.Start()
	s.data.Start()
}

// Close kills every sandbox and stops the listeners.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	sbs := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		sbs = append(sbs, sb)
	}
	s.sandboxes = map[string]*sandbox{}
	s.mu.Unlock()
	for _, sb := range sbs {
		sb.destroy()
	}
	s.data.CloseClientConnections()
	s.api.Close()
	s.data.Close()
}

// APIURL is the value for E2B_API_URL.
func (s *Server) APIURL() string { return s.api.URL }

// SandboxURL is the value for E2B_SANDBOX_URL (routes by E2b-Sandbox-Id and
// E2b-Sandbox-Port headers).
func (s *Server) SandboxURL() string { return s.data.URL }

// APIKey is the accepted API key.
func (s *Server) APIKey() string { return s.opts.APIKey }

// Env returns E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL for this server.
func (s *Server) Env() map[string]string {
	return map[string]string{"E2B_API_KEY": s.opts.APIKey, "E2B_API_URL": s.APIURL(), "E2B_SANDBOX_URL": s.SandboxURL()}
}

// Deviations returns the protocol deviations recorded so far.
func (s *Server) Deviations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deviations...)
}

// CreateRequests returns the bodies of the create requests (POST /sandboxes)
// received so far, in order, as the client sent them (re-encoded JSON). They
// include envVars: test code only.
func (s *Server) CreateRequests() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.creates...)
}

// ResetDeviations forgets recorded deviations (for tests that send bad
// requests on purpose).
func (s *Server) ResetDeviations() {
	s.mu.Lock()
	s.deviations = nil
	s.mu.Unlock()
}

// FailOnDeviation makes tb fail at cleanup if any deviation was recorded.
func (s *Server) FailOnDeviation(tb TB) {
	tb.Helper()
	tb.Cleanup(func() {
		for _, d := range s.Deviations() {
			tb.Errorf("e2bfake: protocol deviation: %s", d)
		}
	})
}

func (s *Server) deviate(r *http.Request, format string, args ...any) {
	msg := fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, fmt.Sprintf(format, args...))
	s.log.Debug("protocol deviation", slog.String("deviation", msg))
	s.mu.Lock()
	s.deviations = append(s.deviations, msg)
	s.mu.Unlock()
}

// SetFaults replaces the server-wide faults.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// SetSandboxFaults replaces one sandbox's faults. It returns false if the
// sandbox does not exist.
func (s *Server) SetSandboxFaults(id string, f Faults) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return false
	}
	sb.faults = &f
	return true
}

// dataFaults returns the data-plane faults for a sandbox (nil sb = server).
func (s *Server) dataFaults(sb *sandbox) Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb != nil && sb.faults != nil {
		return *sb.faults
	}
	return s.faults
}

// takeAPIFault consumes one 429 or 503 from the server's counters or the
// sandbox's (when id is set) and reports what to answer (0 = nothing).
func (s *Server) takeAPIFault(id string) (status int, retryAfter string, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	try := func(f *Faults) bool {
		if f.RateLimit > 0 {
			f.RateLimit--
			status, retryAfter = http.StatusTooManyRequests, f.RetryAfter
			return true
		}
		if f.ServerErrors > 0 {
			f.ServerErrors--
			status = http.StatusServiceUnavailable
			return true
		}
		return false
	}
	delay = s.faults.Delay
	if !try(&s.faults) {
		if sb := s.sandboxes[id]; sb != nil && sb.faults != nil {
			try(sb.faults)
		}
	}
	return status, retryAfter, delay
}

// SandboxIDs lists the live (running or paused) sandboxes.
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// SandboxDir returns the host directory standing for a sandbox's "/".
func (s *Server) SandboxDir(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return "", false
	}
	return sb.root, true
}

// ExpireSandbox ends a sandbox now as if its timeout had passed (it is
// paused instead when it was created with autoPause). Open streams drop and
// envd answers 502 from then on.
func (s *Server) ExpireSandbox(id string) bool {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		return false
	}
	s.expire(sb)
	return true
}

func (s *Server) tempRoot() (string, error) {
	return os.MkdirTemp(s.opts.Dir, "e2bfake-sandbox-*")
}
