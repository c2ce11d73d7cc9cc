package modalworker

import (
	"log/slog"
	"time"

	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
)

// Environment variables read by ConfigFromEnv besides Modal's own
// (MODAL_TOKEN_ID, MODAL_TOKEN_SECRET, MODAL_SERVER_URL, MODAL_ENVIRONMENT,
// MODAL_PROFILE, MODAL_CONFIG_PATH, MODAL_IMAGE_BUILDER_VERSION,
// MODAL_MAX_THROTTLE_WAIT, read as Modal's SDKs read them).
const (
	// EnvApp is the Modal app the worker's sandboxes belong to (default
	// "sandboxio"; created if missing).
	EnvApp = "SBX_MODAL_APP"
	// EnvImage is the registry image of classes that name none.
	EnvImage = "SBX_MODAL_IMAGE"
)

// Defaults.
const (
	DefaultApp   = "sandboxio"
	DefaultImage = "python:3.12-slim"
)

// Config configures a Backend. Build it with ConfigFromEnv and set WorkerID
// and Logger.
type Config struct {
	// Modal is the client configuration (server, tokens, environment).
	// NewBackend fails when the tokens are missing or rejected.
	Modal modalapi.Config
	// WorkerID is put in every sandbox's tags (sandboxio.worker) and scopes
	// ListSandboxes. Required.
	WorkerID string
	// App is the Modal app name (default DefaultApp).
	App string
	// Image is the registry image used when a class names none (default
	// DefaultImage).
	Image string

	// RequestTimeout bounds one control-plane call (default 30 s).
	RequestTimeout time.Duration
	// KillTimeout bounds the kill of a process whose Exec ended early
	// (default 10 s).
	KillTimeout time.Duration
	// DrainTimeout bounds the wait for the rest of a process's output
	// after it exited (a background child may hold its pipes; default 5 s).
	DrainTimeout time.Duration
	// PollInterval is the SandboxGetTaskId polling interval while a new
	// sandbox is scheduled (default 250 ms).
	PollInterval time.Duration

	// Logger receives the backend's logs; discarded when nil.
	Logger *slog.Logger
}

// ConfigFromEnv reads Modal's variables and profile file (through
// modalapi.ConfigFromEnv) and SBX_MODAL_APP and SBX_MODAL_IMAGE with getenv
// (pass os.Getenv).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	mc, err := modalapi.ConfigFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	return Config{Modal: mc, App: getenv(EnvApp), Image: getenv(EnvImage)}, nil
}

func (c Config) withDefaults() Config {
	if c.App == "" {
		c.App = DefaultApp
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.KillTimeout <= 0 {
		c.KillTimeout = 10 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 250 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
