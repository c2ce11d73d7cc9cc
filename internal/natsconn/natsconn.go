package natsconn

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"

	"github.com/sandboxio/sandboxio/pkg/client"
)

// DefaultURL is the server when nothing says otherwise.
const DefaultURL = client.DefaultURL

// Environment variables: the client's (pkg/client reads the same ones), and
// the nats CLI context, which only sandboxio's commands and roles read.
const (
	EnvURL      = client.EnvURL
	EnvCreds    = client.EnvCreds
	EnvNKey     = client.EnvNKey
	EnvUser     = client.EnvUser
	EnvPassword = client.EnvPassword
	EnvToken    = client.EnvToken
	EnvCA       = client.EnvCA
	EnvCert     = client.EnvCert
	EnvKey      = client.EnvKey
	EnvContext  = "SBX_NATS_CONTEXT"
)

// Errors, to classify with errors.Is.
var (
	// ErrBadSettings: settings that contradict each other or a file that
	// is missing, unreadable or malformed. Nothing was tried.
	ErrBadSettings = errors.New("natsconn: bad connection settings")
	// ErrAuthorization: the server refused the credentials (wrong,
	// expired, revoked, or none given where it needs some).
	ErrAuthorization = errors.New("natsconn: authorization violation")
	// ErrUnreachable: no server answered at the URL.
	ErrUnreachable = errors.New("natsconn: server unreachable")
	// ErrTLS: the TLS handshake failed (a CA that does not verify the
	// server, a client certificate the server refuses or does not get).
	ErrTLS = errors.New("natsconn: TLS handshake failed")
)

// Options are the connection settings. The zero value connects to
// DefaultURL without credentials.
type Options struct {
	URL      string // one or more URLs, comma-separated
	Creds    string // creds file (user JWT and seed)
	NKey     string // nkey seed file
	User     string
	Password string
	Token    string
	CA       string // CA certificate file (PEM)
	Cert     string // client certificate file (PEM)
	Key      string // client key file (PEM)
	Context  string // nats CLI context: a name, or the path of a .json file

	// Name is the connection's name on the server.
	Name string
	// Wait is how long Connect keeps trying a server it cannot reach (one
	// try a second); 0 tries once. Refused credentials never retry.
	Wait time.Duration
	// Reconnect keeps reconnecting for ever after a connection was made
	// (the services); otherwise nats.go's default applies.
	Reconnect bool
	// Logger, when set, hears about a server Connect waits for (the first
	// failure, then every 30 tries) and the server's asynchronous errors
	// on the connection (permission violations). Never a secret.
	Logger *slog.Logger

	// from names where each setting came from, for error messages.
	from map[string]string
}

// FromEnv reads the SBX_NATS_* variables.
func FromEnv() Options {
	e := client.SettingsFromEnv()
	o := Options{URL: e.URL, Creds: e.Creds, NKey: e.NKey, User: e.User, Password: e.Password, Token: e.Token,
		CA: e.CA, Cert: e.Cert, Key: e.Key, Context: os.Getenv(EnvContext)}
	o.note("env")
	return o
}

// AddFlags registers --creds, --nkey, --user, --password, --token,
// --tlsca, --tlscert, --tlskey and --context on fs, storing into o (the
// URL flag is the caller's: sandboxio calls it --nats).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Creds, "creds", "", "NATS creds file (user JWT and seed) (env "+EnvCreds+")")
	fs.StringVar(&o.NKey, "nkey", "", "NATS nkey seed file (env "+EnvNKey+")")
	fs.StringVar(&o.User, "user", "", "NATS user name (env "+EnvUser+")")
	fs.StringVar(&o.Password, "password", "", "NATS password (env "+EnvPassword+")")
	fs.StringVar(&o.Token, "token", "", "NATS token (env "+EnvToken+")")
	fs.StringVar(&o.CA, "tlsca", "", "CA certificate file to verify the NATS server (env "+EnvCA+")")
	fs.StringVar(&o.Cert, "tlscert", "", "client certificate file for NATS TLS (env "+EnvCert+")")
	fs.StringVar(&o.Key, "tlskey", "", "client key file for NATS TLS (env "+EnvKey+")")
	fs.StringVar(&o.Context, "context", "", "nats CLI context name or .json file (env "+EnvContext+")")
}

// Merge returns o with every empty setting taken from d (e.g.
// flags.Merge(FromEnv())).
func (o Options) Merge(d Options) Options {
	from := map[string]string{}
	for k, v := range d.from {
		from[k] = v
	}
	for k, v := range o.from {
		from[k] = v
	}
	fill := func(dst *string, src string, key string) {
		if *dst == "" && src != "" {
			*dst = src
			if w, ok := d.from[key]; ok {
				from[key] = w
			}
		} else if *dst != "" {
			if _, ok := o.from[key]; !ok {
				from[key] = "flag"
			}
		}
	}
	fill(&o.URL, d.URL, "url")
	fill(&o.Creds, d.Creds, "creds")
	fill(&o.NKey, d.NKey, "nkey")
	fill(&o.User, d.User, "user")
	fill(&o.Password, d.Password, "password")
	fill(&o.Token, d.Token, "token")
	fill(&o.CA, d.CA, "ca")
	fill(&o.Cert, d.Cert, "cert")
	fill(&o.Key, d.Key, "key")
	fill(&o.Context, d.Context, "context")
	if o.Name == "" {
		o.Name = d.Name
	}
	if o.Wait == 0 {
		o.Wait = d.Wait
	}
	if o.Logger == nil {
		o.Logger = d.Logger
	}
	o.Reconnect = o.Reconnect || d.Reconnect
	o.from = from
	return o
}

func (o *Options) note(where string) {
	o.from = map[string]string{}
	for k, v := range map[string]string{"url": o.URL, "creds": o.Creds, "nkey": o.NKey, "user": o.User,
		"password": o.Password, "token": o.Token, "ca": o.CA, "cert": o.Cert, "key": o.Key, "context": o.Context} {
		if v != "" {
			o.from[k] = where
		}
	}
}

// contextFile is the part of a nats CLI context this package uses.
type contextFile struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	NSC      string `json:"nsc"`
	UserJWT  string `json:"user_jwt"`
	TLSFirst bool   `json:"tls_first"`
}

// ContextDir is where the nats CLI keeps contexts.
func ContextDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "nats", "context"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: nats context: %v", ErrBadSettings, err)
	}
	return filepath.Join(home, ".config", "nats", "context"), nil
}

// Resolve applies the nats CLI context, if any, under the explicit
// settings, and the default URL.
func (o Options) Resolve() (Options, error) {
	if o.Context != "" {
		path := o.Context
		if !strings.HasSuffix(path, ".json") {
			if strings.ContainsAny(path, `/\`) || path == "." || path == ".." {
				return o, fmt.Errorf("%w: nats context %q: a name has no path separators (or give a .json file)", ErrBadSettings, o.Context)
			}
			dir, err := ContextDir()
			if err != nil {
				return o, err
			}
			path = filepath.Join(dir, o.Context+".json")
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return o, fmt.Errorf("%w: nats context %q: %v", ErrBadSettings, o.Context, err)
		}
		var c contextFile
		if err := json.Unmarshal(b, &c); err != nil {
			return o, fmt.Errorf("%w: nats context %q (%s): %v", ErrBadSettings, o.Context, path, err)
		}
		if c.NSC != "" || c.UserJWT != "" {
			return o, fmt.Errorf("%w: nats context %q: nsc lookups and inline user JWTs are not supported; use a creds file", ErrBadSettings, o.Context)
		}
		d := Options{URL: c.URL, Creds: expandHome(c.Creds), NKey: expandHome(c.NKey), User: c.User, Password: c.Password,
			Token: c.Token, CA: expandHome(c.CA), Cert: expandHome(c.Cert), Key: expandHome(c.Key)}
		d.note("nats context " + o.Context)
		ctx := o.Context
		o = o.Merge(d)
		o.Context = ctx
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	return o, nil
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// Describe names the credentials for messages: "creds file X (flag)".
// It never includes a secret.
func (o Options) Describe() string {
	src := func(k string) string {
		if w := o.from[k]; w != "" && w != "flag" {
			return " (from " + w + ")"
		}
		return ""
	}
	switch {
	case o.Creds != "":
		return "creds file " + o.Creds + src("creds")
	case o.NKey != "":
		return "nkey seed file " + o.NKey + src("nkey")
	case o.User != "":
		return "user " + o.User + src("user")
	case o.Token != "":
		return "a token" + src("token")
	default:
		return "no credentials"
	}
}

// NATSOptions checks the settings and files and returns the nats.go
// options for them (credentials, TLS, name). It reads every file it names
// so that a missing or malformed one fails here, clearly.
func (o Options) NATSOptions() ([]nats.Option, error) {
	n := 0
	for _, set := range []bool{o.Creds != "", o.NKey != "", o.User != "" || o.Password != "", o.Token != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, fmt.Errorf("%w: give one of creds file, nkey seed file, user/password or token (got %d)", ErrBadSettings, n)
	}
	if o.Password != "" && o.User == "" {
		return nil, fmt.Errorf("%w: a password needs a user", ErrBadSettings)
	}
	var opts []nats.Option
	if o.Name != "" {
		opts = append(opts, nats.Name(o.Name))
	}
	switch {
	case o.Creds != "":
		if err := checkCreds(o.Creds, o.label("creds", "creds file", EnvCreds)); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(o.Creds))
	case o.NKey != "":
		opt, err := nkeyOption(o.NKey, o.label("nkey", "nkey seed file", EnvNKey))
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, fmt.Errorf("%w: a TLS client certificate needs its key (--tlscert and --tlskey)", ErrBadSettings)
	}
	if o.Cert != "" {
		if _, err := tls.LoadX509KeyPair(o.Cert, o.Key); err != nil {
			return nil, fmt.Errorf("%w: TLS client certificate %s / key %s: %v", ErrBadSettings, o.Cert, o.Key, err)
		}
		opts = append(opts, nats.ClientCert(o.Cert, o.Key))
	}
	if o.CA != "" {
		if err := readable(o.CA, "TLS CA file"); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(o.CA))
	}
	return opts, nil
}

func readable(path, what string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrBadSettings, what, path, err)
	}
	return f.Close()
}

// label names a setting for an error: "creds file" or "creds file
// (SBX_NATS_CREDS)" or "creds file (nats context X)".
func (o Options) label(key, what, env string) string {
	switch w := o.from[key]; {
	case w == "env":
		return what + " (" + env + ")"
	case w != "" && w != "flag":
		return what + " (" + w + ")"
	}
	return what
}

func checkCreds(path, what string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrBadSettings, what, path, err)
	}
	defer wipe(b)
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%w: %s %s: no user JWT: %v", ErrBadSettings, what, path, err)
	}
	if _, err := jwt.DecodeUserClaims(tok); err != nil {
		return fmt.Errorf("%w: %s %s: not a user JWT: %v", ErrBadSettings, what, path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%w: %s %s: no user seed: %v", ErrBadSettings, what, path, err)
	}
	kp.Wipe()
	return nil
}

func nkeyOption(path, what string) (nats.Option, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrBadSettings, what, path, err)
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrBadSettings, what, path, err)
	}
	defer kp.Wipe()
	if _, err := kp.Seed(); err != nil {
		return nil, fmt.Errorf("%w: %s %s holds no seed: %v", ErrBadSettings, what, path, err)
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrBadSettings, what, path, err)
	}
	return opt, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// Connect resolves o and connects. A refused login is ErrAuthorization
// naming the credentials and is never retried; an unreachable server is
// ErrUnreachable, tried once a second while o.Wait and ctx allow. extra
// options come after natsconn's (nats.InProcessServer, handlers…).
func Connect(ctx context.Context, o Options, extra ...nats.Option) (*nats.Conn, error) {
	o, err := o.Resolve()
	if err != nil {
		return nil, err
	}
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	// A short ping interval notices a partitioned server in seconds, not
	// the default two minutes.
	opts = append(opts, nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(3), nats.Timeout(5*time.Second))
	if o.Reconnect {
		opts = append(opts, nats.MaxReconnects(-1))
	}
	if log := o.Logger; log != nil {
		// The server's asynchronous errors (a permission violation, a
		// slow consumer) go to the log instead of nats.go's stderr print.
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"err", err}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Warn("NATS error", attrs...)
		}))
	}
	opts = append(opts, extra...)
	deadline := time.Now().Add(o.Wait)
	for try := 0; ; try++ {
		nc, err := nats.Connect(o.URL, opts...)
		if err == nil {
			return nc, nil
		}
		if authError(err) {
			return nil, fmt.Errorf("%w: %s refused %s (wrong, expired or revoked credentials?): %w",
				ErrAuthorization, redactURL(o.URL), o.Describe(), err)
		}
		if isTLSError(err) {
			return nil, fmt.Errorf("%w: %s (CA %q, client certificate %q): %w", ErrTLS, redactURL(o.URL), o.CA, o.Cert, err)
		}
		if !errors.Is(err, nats.ErrNoServers) && !isNetError(err) {
			return nil, fmt.Errorf("natsconn: connect %s with %s: %w", redactURL(o.URL), o.Describe(), err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, redactURL(o.URL), err)
		}
		if o.Logger != nil && try%30 == 0 {
			o.Logger.Warn("NATS server unreachable; retrying every second", "url", redactURL(o.URL), "err", err, "tries", try+1)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, redactURL(o.URL), errors.Join(ctx.Err(), err))
		case <-time.After(time.Second):
		}
	}
}

func authError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// redactURL drops user:password from a URL for messages.
func redactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if at := strings.LastIndex(p, "@"); at >= 0 {
			if s := strings.Index(p, "://"); s >= 0 && s < at {
				parts[i] = p[:s+3] + "***@" + p[at+1:]
			} else {
				parts[i] = "***@" + p[at+1:]
			}
		}
	}
	return strings.Join(parts, ",")
}
