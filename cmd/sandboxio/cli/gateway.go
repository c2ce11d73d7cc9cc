package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/services/gateway"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// Defaults of the ports gateway, in `gateway` and in `dev`.
const (
	defaultGatewayListen = "127.0.0.1:8480"
	defaultGatewayDomain = "sbx.localhost"
)

// gatewayFlags are the flags the gateway's Config is read from.
type gatewayFlags struct {
	listen, domain, certFile, keyFile string
	publicHTTPS                       bool
	maxBody                           string
	limits                            gateway.Limits
	cookieTTL                         time.Duration
	// e2bListen and e2b: the E2B-compatible API on a listener of its own.
	e2bListen string
	e2b       http.Handler
	// linkKey is the port link key (dev: made in memory and shared with
	// the router); linkKeyFile, when linkKey is nil, the file to read it
	// from (empty: none, the token header only).
	linkKey     []byte
	linkKeyFile string
}

// loadPortLinkKey reads --port-link-key-file ("": no key).
func loadPortLinkKey(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	k, err := portauth.LoadKey(file)
	if err != nil {
		return nil, fmt.Errorf("--port-link-key-file: %w", err)
	}
	return k, nil
}

func (f *gatewayFlags) register(cmd *cobra.Command, prefix string) {
	fs := cmd.Flags()
	fs.StringVar(&f.domain, prefix+"domain", envOr("SBX_GATEWAY_DOMAIN", defaultGatewayDomain),
		"host routing domain: <port>-<sandbox>.DOMAIN (*.localhost is loopback, no DNS needed; empty: path routing only) (env SBX_GATEWAY_DOMAIN)")
	fs.StringVar(&f.certFile, prefix+"tls-cert", os.Getenv("SBX_GATEWAY_TLS_CERT"), "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&f.keyFile, prefix+"tls-key", os.Getenv("SBX_GATEWAY_TLS_KEY"), "and this key (PEM)")
	fs.BoolVar(&f.publicHTTPS, prefix+"public-https", false, "clients reach the gateway over HTTPS through a TLS terminator: Secure cookies, X-Forwarded-Proto https")
	fs.IntVar(&f.limits.MaxConnsPerPort, prefix+"max-conns-per-port", gateway.DefaultLimits.MaxConnsPerPort, "requests and upgraded connections in flight to one sandbox port (429 past it)")
	fs.IntVar(&f.limits.MaxConnsPerTenant, prefix+"max-conns-per-tenant", gateway.DefaultLimits.MaxConnsPerTenant, "requests and upgraded connections in flight to one tenant's sandboxes (429 past it)")
	fs.IntVar(&f.limits.MaxClientConns, prefix+"max-client-conns", gateway.DefaultLimits.MaxClientConns, "client connections each listener holds at once, every tenant together (more wait in the backlog)")
	fs.StringVar(&f.maxBody, prefix+"max-body", "64MiB", "largest request body (413 past it)")
	fs.DurationVar(&f.limits.IdleTimeout, prefix+"idle-timeout", gateway.DefaultLimits.IdleTimeout, "close a connection to a sandbox with no byte either way for this long")
	fs.DurationVar(&f.limits.MaxDuration, prefix+"max-duration", gateway.DefaultLimits.MaxDuration, "longest request, streamed response or upgraded connection")
	fs.DurationVar(&f.cookieTTL, prefix+"cookie-ttl", gateway.DefaultCookieTTL, "life of the cookie a signed link is traded for (at most 24h)")
}

// config builds the gateway's Config.
func (f *gatewayFlags) config(d gateway.PortDialer, log *slog.Logger) (gateway.Config, error) {
	body, err := parseSize(f.maxBody)
	if err != nil {
		return gateway.Config{}, fmt.Errorf("--max-body: %w", err)
	}
	lim := f.limits
	lim.MaxRequestBody = body
	if (f.certFile == "") != (f.keyFile == "") {
		return gateway.Config{}, usageErr(fmt.Errorf("--tls-cert and --tls-key go together"))
	}
	linkKey := f.linkKey
	if linkKey == nil {
		if linkKey, err = loadPortLinkKey(f.linkKeyFile); err != nil {
			return gateway.Config{}, err
		}
	}
	return gateway.Config{Listen: f.listen, Domain: f.domain, TLSCertFile: f.certFile, TLSKeyFile: f.keyFile,
		PublicHTTPS: f.publicHTTPS, Dialer: d, Limits: lim, CookieTTL: f.cookieTTL, PortLinkKey: linkKey,
		E2BListen: f.e2bListen, E2B: f.e2b, Logger: log}, nil
}

// baseURL is the gateway's address as a URL, for the router's replies.
func gatewayBaseURL(svc *gateway.Service, https bool) string {
	scheme := "http"
	if https {
		scheme = "https"
	}
	return scheme + "://" + svc.Addr().String()
}

// startGateway opens the tunnel dialer and the gateway on nc; close ends
// the dialer (after the gateway's Run has returned).
func startGateway(nc *nats.Conn, f *gatewayFlags, signingSeed []byte, log *slog.Logger) (*gateway.Service, func(), error) {
	d, closeDialer, err := newPortDialer(nc, signingSeed, log)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := f.config(d, log)
	if err != nil {
		closeDialer()
		return nil, nil, err
	}
	svc, err := gateway.New(cfg, nc)
	if err != nil {
		closeDialer()
		return nil, nil, err
	}
	return svc, closeDialer, nil
}

func gatewayCmd(g *globals) *cobra.Command {
	var f gatewayFlags
	var metricsAddr, signingFile, e2bListen, e2bCreds, e2bDomain, e2bTokenKey, e2bTemplates string
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the ports gateway: HTTP to sandboxes' published ports, by host or by path, against --nats",
		Long: `gateway serves the ports that sandboxes publish (sandboxio port expose) over HTTP:

  http://<port>-<sandbox>.<domain>/...               (host routing, --domain)
  http://<listen>/sandboxes/<sandbox>/ports/<port>/... (path routing)

It reads the sandbox registry from the bus and carries each connection through the
worker that owns the sandbox (its agent connects to 127.0.0.1:<port> inside it), so
a sandbox with egress denied is reachable on the ports it publishes and nothing else.
Any number of gateways may run. docs/ports.md says what answers 404, 401, 409, 502.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			_, seed, err := (&workerKeys{signingFile: signingFile}).load()
			if err != nil {
				return err
			}
			nc, err := g.connectService(cmd.Context(), "sandboxio-gateway")
			if err != nil {
				return err
			}
			defer nc.Close()
			if e2bListen != "" {
				// The E2B-compatible front door calls the router on behalf of
				// each API key's tenant: on --e2b-creds's connection (the
				// layout's e2b user by default), else on the gateway's.
				if e2bCreds == "" {
					e2bCreds = layoutE2BCreds(g.natsOptions("").Creds)
				}
				if e2bCreds == "" && g.natsOptions("").Creds != "" {
					log.Warn("no --e2b-creds and no e2b.creds beside the gateway's creds: the E2B API acts on the gateway's connection, whose user may not call the API for tenants (sandboxio auth init --if-missing adds the e2b user)")
				}
				cfg := e2bapi.Config{Domain: e2bDomain, Logger: log}
				if e2bTokenKey != "" {
					if cfg.TokenKey, err = e2bapi.LoadTokenKey(e2bTokenKey); err != nil {
						return fmt.Errorf("--e2b-token-key-file: %w", err)
					}
				} else {
					log.Warn("no --e2b-token-key-file: envd access tokens are signed with a key made for this process; they stop working when it restarts, and other gateways refuse them")
				}
				if e2bTemplates != "" {
					if cfg.Templates, err = e2bapi.LoadTemplates(e2bTemplates); err != nil {
						return fmt.Errorf("--e2b-templates: %w", err)
					}
				}
				enc := nc
				if e2bCreds != "" {
					o := g.natsOptions("sandboxio-e2b-api")
					o.Creds, o.NKey, o.User, o.Password, o.Token = e2bCreds, "", "", "", ""
					o.Reconnect, o.Wait, o.Logger = true, serviceWait, log
					if enc, err = natsconn.Connect(cmd.Context(), o); err != nil {
						return err
					}
					defer enc.Close()
				}
				cfg.Conn = enc
				api, err := e2bapi.New(cfg)
				if err != nil {
					return err
				}
				defer api.Close()
				f.e2bListen, f.e2b = e2bListen, api
			}
			svc, closeDialer, err := startGateway(nc, &f, seed, log)
			if err != nil {
				return err
			}
			defer closeDialer()
			if f.linkKeyFile == "" {
				log.Warn("no --port-link-key-file: private ports take the token header only (no browser links or cookies)")
			}
			if a := svc.E2BAddr(); a != nil {
				fmt.Fprintf(g.stdout, "E2B-compatible API on http://%s\n", a)
			}
			fmt.Fprintf(g.stdout, "sandboxio gateway on %s (ports: %s)\n", gatewayBaseURL(svc, f.certFile != "" || f.publicHTTPS),
				portURLPattern(svc, f))
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			if metricsAddr != "" {
				served := make(chan error, 1)
				go func() { served <- telemetry.ServeMetrics(ctx, metricsAddr, svc.MetricsHandler(), log) }()
				defer func() { cancel(); <-served }()
			}
			return svc.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&f.listen, "listen", envOr("SBX_GATEWAY_LISTEN", defaultGatewayListen), "host:port of the HTTP listener (env SBX_GATEWAY_LISTEN)")
	f.register(cmd, "")
	cmd.Flags().StringVar(&metricsAddr, "metrics", os.Getenv("SBX_GATEWAY_METRICS_ADDR"),
		"serve the gateway's metrics (requests, bytes, credential checks per sandbox port) at /metrics on this address (env SBX_GATEWAY_METRICS_ADDR)")
	cmd.Flags().StringVar(&e2bListen, "e2b-listen", os.Getenv("SBX_E2B_LISTEN"),
		"also serve the E2B-compatible API (E2B's SDKs, unchanged) on this host:port (env SBX_E2B_LISTEN)")
	cmd.Flags().StringVar(&e2bCreds, "e2b-creds", os.Getenv("SBX_E2B_CREDS"),
		"creds of the user the E2B API acts for tenants with: the layout's e2b user (default: e2b.creds beside the gateway's --creds when there is one, else the gateway's connection) (env SBX_E2B_CREDS)")
	cmd.Flags().StringVar(&e2bTokenKey, "e2b-token-key-file", os.Getenv("SBX_E2B_TOKEN_KEY_FILE"),
		"file with the key (at least 32 bytes) that signs the E2B API's envd access tokens; gateways that serve the same sandboxes share it. Without it tokens die with the process (env SBX_E2B_TOKEN_KEY_FILE)")
	cmd.Flags().StringVar(&e2bTemplates, "e2b-templates", os.Getenv("SBX_E2B_TEMPLATES"),
		"YAML file mapping E2B template ids to classes or dsns, e.g. 'base: {class: standard}' (default: base and code-interpreter-v1) (env SBX_E2B_TEMPLATES)")
	cmd.Flags().StringVar(&e2bDomain, "e2b-domain", os.Getenv("SBX_E2B_DOMAIN"),
		"the domain the E2B API gives its sandboxes (empty: the SDK keeps its own) (env SBX_E2B_DOMAIN)")
	cmd.Flags().StringVar(&f.linkKeyFile, "port-link-key-file", os.Getenv("SBX_PORT_LINK_KEY_FILE"),
		"file with the routers' port link key (sandboxio auth init writes keys/port-link.key): checks private ports' browser links and keys their cookies. Without it: the token header only (env SBX_PORT_LINK_KEY_FILE)")
	cmd.Flags().StringVar(&signingFile, "signing-key", os.Getenv("SBX_SIGNING_KEY_FILE"),
		"file with the gateway's nkey seed (SU…) that signs its port opens; workers with trusted commanders run only signed ones (env SBX_SIGNING_KEY_FILE)")
	return cmd
}

// layoutE2BCreds is the layout's e2b user's creds when the gateway's creds
// file is in a layout's creds directory that holds them (auth init writes
// creds/gateway.creds and creds/e2b.creds side by side), else "".
func layoutE2BCreds(gatewayCreds string) string {
	if gatewayCreds == "" {
		return ""
	}
	p := filepath.Join(filepath.Dir(gatewayCreds), auth.RoleE2B+".creds")
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// portURLPattern shows how a port's URL looks.
func portURLPattern(svc *gateway.Service, f gatewayFlags) string {
	base := gatewayBaseURL(svc, f.certFile != "" || f.publicHTTPS)
	if f.domain == "" {
		return base + "/sandboxes/<sandbox>/ports/<port>/"
	}
	_, port, _ := net.SplitHostPort(svc.Addr().String())
	scheme := "http"
	if f.certFile != "" || f.publicHTTPS {
		scheme = "https"
	}
	return scheme + "://<port>-<sandbox>." + f.domain + ":" + port + "/ or " + base + "/sandboxes/<sandbox>/ports/<port>/"
}
