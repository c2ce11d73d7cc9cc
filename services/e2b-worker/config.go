package e2bworker

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/e2bapi"
)

// Environment variables read by ConfigFromEnv besides E2B's own
// (E2B_API_KEY, E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL, read as the
// official SDKs read them).
const (
	// EnvTemplate is the template of classes that name none (default "base").
	EnvTemplate = "SBX_E2B_TEMPLATE"
	// EnvCodeInterpreter ("true"/"false") says whether the templates served
	// by this worker run E2B's code interpreter (port 49999); it turns on the
	// run_code and stateful_code capabilities. Default: true when the default
	// template's name contains "code-interpreter".
	EnvCodeInterpreter = "SBX_E2B_CODE_INTERPRETER"
	// EnvUser is the envd user that runs processes and owns files ("" =
	// the template's default user).
	EnvUser = "SBX_E2B_USER"
)

// DefaultTemplate is E2B's SDK default template.
const DefaultTemplate = "base"

// Config configures a Backend. Build it with ConfigFromEnv and set WorkerID
// and Logger.
type Config struct {
	// E2B is the control-plane and data-plane configuration: API key, domain
	// and URL overrides. NewBackend fails when E2B.APIKey is empty.
	E2B e2bapi.Config
	// WorkerID is recorded in every sandbox's metadata (io.sandboxio.worker)
	// and scopes ListSandboxes. Required.
	WorkerID string
	// Template is used when a class names none. Default DefaultTemplate.
	Template string
	// CodeInterpreter advertises run_code and stateful_code: set it when the
	// templates this worker serves run E2B's code interpreter.
	CodeInterpreter bool
	// User is the envd user for processes and files ("" = template default).
	User string

	// RequestTimeout bounds one control-plane request and one unary envd
	// call (default 60 s, the SDKs' request timeout).
	RequestTimeout time.Duration
	// KeepaliveInterval is sent to envd as Keepalive-Ping-Interval on process
	// streams (default 50 s, as the SDKs). A stream silent for longer than
	// KeepaliveInterval+StallGrace is classified by a /health probe.
	KeepaliveInterval time.Duration
	// StallGrace: see KeepaliveInterval (default 5 s).
	StallGrace time.Duration
	// CodeStallTimeout bounds the silence of a run_code stream (the code
	// interpreter sends a keepalive every 5 s). Default 60 s.
	CodeStallTimeout time.Duration
	// KillTimeout bounds the SIGKILL sent to a process whose Exec context
	// ended, and each run of the script that signals its group or kills
	// its tree (default 5 s).
	KillTimeout time.Duration
	// HTTPClient carries the data-plane traffic (envd, code interpreter). It
	// must not have an overall Timeout (streams last as long as processes).
	// Default: a transport with compression disabled, as the SDKs.
	HTTPClient *http.Client

	// Logger receives the backend's logs; discarded when nil. Secrets, the
	// API key and envd access tokens are never logged.
	Logger *slog.Logger
}

// ConfigFromEnv reads E2B's variables (through e2bapi.ConfigFromEnv) and
// SBX_E2B_TEMPLATE, SBX_E2B_CODE_INTERPRETER and SBX_E2B_USER with getenv
// (pass os.Getenv).
func ConfigFromEnv(getenv func(string) string) Config {
	c := Config{
		E2B:      e2bapi.ConfigFromEnv(getenv),
		Template: getenv(EnvTemplate),
		User:     getenv(EnvUser),
	}
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if v, err := strconv.ParseBool(getenv(EnvCodeInterpreter)); err == nil {
		c.CodeInterpreter = v
	} else {
		c.CodeInterpreter = strings.Contains(c.Template, "code-interpreter")
	}
	return c
}

func (c Config) withDefaults() Config {
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.KeepaliveInterval <= 0 {
		c.KeepaliveInterval = 50 * time.Second
	}
	if c.StallGrace <= 0 {
		c.StallGrace = 5 * time.Second
	}
	if c.CodeStallTimeout <= 0 {
		c.CodeStallTimeout = 60 * time.Second
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
