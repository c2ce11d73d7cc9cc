package modalapi

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by ConfigFromEnv, as Modal's SDKs name them.
const (
	EnvServerURL           = "MODAL_SERVER_URL"
	EnvTokenID             = "MODAL_TOKEN_ID"
	EnvTokenSecret         = "MODAL_TOKEN_SECRET"
	EnvEnvironment         = "MODAL_ENVIRONMENT"
	EnvImageBuilderVersion = "MODAL_IMAGE_BUILDER_VERSION"
	EnvMaxThrottleWait     = "MODAL_MAX_THROTTLE_WAIT"
	EnvProfile             = "MODAL_PROFILE"
	EnvConfigPath          = "MODAL_CONFIG_PATH"
)

// DefaultServerURL is the Go and JS SDKs' control-plane URL.
const DefaultServerURL = "https://api.modal.com:443"

// Config configures a Client.
type Config struct {
	// ServerURL is the control plane: https:// (TLS, system roots) or
	// http:// (plaintext h2c). Default DefaultServerURL.
	ServerURL string
	// TokenID and TokenSecret are sent as x-modal-token-id and
	// x-modal-token-secret. Never logged.
	TokenID, TokenSecret string
	// Environment is the Modal environment ("" = the workspace default).
	Environment string
	// ImageBuilderVersion skips EnvironmentGetOrCreate when set.
	ImageBuilderVersion string
	// MaxThrottleWait caps the total time one call waits on server-directed
	// retries; 0 means no cap beyond the call's context (the SDKs' default
	// is unlimited). Negative disables throttle retries.
	MaxThrottleWait time.Duration
	// Profile is the profile the values came from ("" when none).
	Profile string

	// Logger receives debug logs; discarded when nil.
	Logger *slog.Logger
}

// LogValue implements slog.LogValuer: a Config never logs its tokens.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("server_url", c.ServerURL),
		slog.String("environment", c.Environment),
		slog.String("profile", c.Profile),
		slog.Bool("token_set", c.TokenID != "" && c.TokenSecret != ""),
	)
}

// String describes the config without its tokens.
func (c Config) String() string {
	return fmt.Sprintf("modalapi.Config{server=%s env=%q profile=%q token_set=%t}", c.ServerURL, c.Environment, c.Profile, c.TokenID != "" && c.TokenSecret != "")
}

// ConfigFromEnv reads the configuration the way Modal's SDKs do: the
// environment variables override the active profile of the config file
// (MODAL_CONFIG_PATH, default ~/.modal.toml), which overrides the defaults.
// The profile is MODAL_PROFILE, else the first section with active = true,
// else "default". A missing file is not an error; an unreadable one is.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	path := getenv(EnvConfigPath)
	if path == "" {
		if home := getenv("HOME"); home != "" {
			path = filepath.Join(home, ".modal.toml")
		}
	}
	var prof map[string]string
	profile := ""
	if path != "" {
		data, err := os.ReadFile(path)
		switch {
		case err == nil:
			profiles, order, perr := parseProfiles(data)
			if perr != nil {
				return Config{}, fmt.Errorf("modalapi: %s: %w", path, perr)
			}
			profile = getenv(EnvProfile)
			if profile == "" {
				for _, name := range order {
					if v, _ := strconv.ParseBool(profiles[name]["active"]); v {
						profile = name
						break
					}
				}
			}
			if profile == "" {
				profile = "default"
			}
			prof = profiles[profile]
			if prof == nil && getenv(EnvProfile) != "" {
				return Config{}, fmt.Errorf("modalapi: %s names profile %q, which %s does not have", EnvProfile, profile, path)
			}
			if prof == nil {
				profile = ""
			}
		case os.IsNotExist(err):
		default:
			return Config{}, fmt.Errorf("modalapi: read %s: %w", path, err)
		}
	}
	pick := func(env, key, def string) string {
		if v := getenv(env); v != "" {
			return v
		}
		if v := prof[key]; v != "" {
			return v
		}
		return def
	}
	c := Config{
		// Python's default is a comma-separated fail-over list: the first
		// entry is the primary.
		ServerURL:           strings.TrimSpace(strings.Split(pick(EnvServerURL, "server_url", DefaultServerURL), ",")[0]),
		TokenID:             pick(EnvTokenID, "token_id", ""),
		TokenSecret:         pick(EnvTokenSecret, "token_secret", ""),
		Environment:         pick(EnvEnvironment, "environment", ""),
		ImageBuilderVersion: pick(EnvImageBuilderVersion, "image_builder_version", ""),
		Profile:             profile,
	}
	if v := pick(EnvMaxThrottleWait, "max_throttle_wait", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return Config{}, fmt.Errorf("modalapi: %s %q: want seconds", EnvMaxThrottleWait, v)
		}
		c.MaxThrottleWait = time.Duration(f * float64(time.Second))
		if f == 0 {
			c.MaxThrottleWait = -1
		}
	}
	return c, nil
}

// parseProfiles reads the subset of TOML that ~/.modal.toml uses: [section]
// headers and key = value lines with string, boolean or number values.
func parseProfiles(data []byte) (map[string]map[string]string, []string, error) {
	out := map[string]map[string]string{}
	var order []string
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				return nil, nil, fmt.Errorf("line %d: bad section header", n)
			}
			cur = strings.Trim(strings.TrimSpace(line[1:len(line)-1]), `"`)
			if _, ok := out[cur]; !ok {
				out[cur] = map[string]string{}
				order = append(order, cur)
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || cur == "" {
			return nil, nil, fmt.Errorf("line %d: want key = value inside a [profile]", n)
		}
		v = strings.TrimSpace(v)
		if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "'") {
			q := v[:1]
			end := strings.Index(v[1:], q)
			if end < 0 {
				return nil, nil, fmt.Errorf("line %d: unterminated string", n)
			}
			v = v[1 : 1+end]
		} else if i := strings.Index(v, "#"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		out[cur][strings.TrimSpace(k)] = v
	}
	return out, order, sc.Err()
}

// IsLocalhost reports whether a URL's host is one the SDKs treat as local
// (which makes the router connection plaintext).
func IsLocalhost(u *url.URL) bool {
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1", "172.21.0.1":
		return true
	}
	return false
}
