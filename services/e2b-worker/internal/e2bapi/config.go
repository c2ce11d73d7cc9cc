package e2bapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Environment variables read by ConfigFromEnv, as the official SDKs name them.
const (
	EnvAPIKey     = "E2B_API_KEY"
	EnvDomain     = "E2B_DOMAIN"
	EnvAPIURL     = "E2B_API_URL"
	EnvSandboxURL = "E2B_SANDBOX_URL"
)

// Well-known ports inside a sandbox.
const (
	EnvdPort            = 49983
	CodeInterpreterPort = 49999
)

// DefaultDomain is the SDKs' default E2B domain.
const DefaultDomain = "e2b.app"

// sharedHostDomains are the domains for which the SDKs send envd traffic to the
// shared "sandbox.<domain>" host and route it with headers.
var sharedHostDomains = map[string]bool{"e2b.app": true, "e2b.dev": true, "e2b.pro": true, "e2b-staging.dev": true}

// Config configures a Client. The zero value plus an APIKey talks to E2B's
// production API.
type Config struct {
	// APIKey is sent as X-API-Key. Never logged.
	APIKey string
	// Domain is the E2B domain; DefaultDomain when empty.
	Domain string
	// APIURL overrides the API base URL (https://api.<domain>).
	APIURL string
	// SandboxURL overrides every data-plane URL (envd and sandbox ports).
	SandboxURL string

	// HTTPClient is used for every request; a client with a 60 s timeout when nil.
	HTTPClient *http.Client
	// Logger receives debug logs; discarded when nil.
	Logger *slog.Logger
	// UserAgent is sent as User-Agent.
	UserAgent string

	// MaxRetries bounds the retries of a request answered with 429 (default 3;
	// negative disables retries).
	MaxRetries int
	// RetryBaseDelay is the first back-off delay (default 500 ms); it doubles per
	// retry up to RetryMaxDelay (default 10 s). A Retry-After header wins when
	// present, but is also capped by RetryMaxDelay.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
}

// ConfigFromEnv builds a Config from environment variables read with getenv
// (pass os.Getenv).
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{
		APIKey:     getenv(EnvAPIKey),
		Domain:     getenv(EnvDomain),
		APIURL:     getenv(EnvAPIURL),
		SandboxURL: getenv(EnvSandboxURL),
	}
}

// String describes the config without the API key.
func (c Config) String() string {
	return fmt.Sprintf("e2bapi.Config{api=%s sandbox=%s key_set=%t}", c.APIBaseURL(), c.SandboxURL, c.APIKey != "")
}

// LogValue implements slog.LogValuer so that a Config never logs its key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("api_url", c.APIBaseURL()),
		slog.String("sandbox_url", c.SandboxURL),
		slog.Bool("api_key_set", c.APIKey != ""),
	)
}

func (c Config) domain() string {
	if c.Domain != "" {
		return c.Domain
	}
	return DefaultDomain
}

// APIBaseURL is the control-plane base URL, without a trailing slash.
func (c Config) APIBaseURL() string {
	if c.APIURL != "" {
		return strings.TrimRight(c.APIURL, "/")
	}
	return "https://api." + c.domain()
}

// EnvdURL is the base URL of envd (port 49983) for a sandbox whose API answer
// carried sandboxDomain (may be empty). Requests must also carry the routing
// headers E2b-Sandbox-Id and E2b-Sandbox-Port, which the shared host needs.
func (c Config) EnvdURL(sandboxID, sandboxDomain string) string {
	if c.SandboxURL != "" {
		return strings.TrimRight(c.SandboxURL, "/")
	}
	d := sandboxDomain
	if d == "" {
		d = c.domain()
	}
	if sharedHostDomains[d] {
		return "https://sandbox." + d
	}
	return c.PortURL(EnvdPort, sandboxID, sandboxDomain)
}

// PortURL is the "direct" URL of a port inside a sandbox
// (https://<port>-<id>.<domain>), used for file links and port 49999.
func (c Config) PortURL(port int, sandboxID, sandboxDomain string) string {
	if c.SandboxURL != "" {
		return strings.TrimRight(c.SandboxURL, "/")
	}
	d := sandboxDomain
	if d == "" {
		d = c.domain()
	}
	return fmt.Sprintf("https://%d-%s.%s", port, sandboxID, d)
}
