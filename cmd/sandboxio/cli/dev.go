package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/gateway"
	"github.com/sandboxio/sandboxio/services/router"
)

func devCmd(g *globals) *cobra.Command {
	cfg := allInOneConfig{}
	var backends, pprofAddr, reservedPorts string
	var gw gatewayFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process on an embedded nats-server (listens on 127.0.0.1:4222)",
		Long: `dev starts an embedded nats-server with JetStream (data in --data-dir), the router,
a worker for every backend that can run here (docker when a Docker daemon answers,
e2b when E2B_API_KEY is set, modal when MODAL_TOKEN_ID is set, and the fake
backend), the auditor, the reaper, and the ports gateway (--gateway, printed at
start: http://<port>-<sandbox>.sbx.localhost:8480/, docs/ports.md).
Other processes and languages connect to --listen. Ctrl-C stops it cleanly.

dev is open by default: anyone who reaches --listen may do anything. --auth runs
the account layout of a secure deployment instead (docs/security.md): the layout
is written to --data-dir/auth the first time (operator, accounts, the services'
creds and keys, and two example tenants, tenant-a and tenant-b), every service
connects with its own creds, and clients connect with a tenant's:
  sandboxio --creds DATA/auth/creds/tenants/tenant-a.creds run --class fake -- echo hi

dev runs its Go collector at GOGC=400 with a 1 GiB soft memory limit (the
whole system shares one heap that allocates much and keeps little); GOGC and
GOMEMLIMIT in the environment take precedence.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			cfg.backends = splitList(backends)
			reserved, err := router.ParsePorts(reservedPorts)
			if err != nil {
				return usageErr(err)
			}
			cfg.reservedPorts = reserved
			if gw.listen != "" {
				cfg.gateway = &gw
				cfg.gatewayAnyPort = !cmd.Flags().Changed("gateway") && os.Getenv("SBX_GATEWAY_LISTEN") == ""
			}
			if gc, lim := applyDevGCDefaults(os.Getenv); gc != 0 || lim != 0 {
				log.Debug("dev GC defaults", "gogc", gc, "gomemlimit", lim)
			}
			stopPprof, err := servePprof(pprofAddr, log)
			if err != nil {
				return err
			}
			defer stopPprof()
			a, err := startAllInOne(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			log.Info("sandboxio dev is up", "url", a.url, "data_dir", cfg.dataDir, "backends", a.backends, "auth", cfg.auth)
			fmt.Fprintf(g.stdout, "sandboxio dev listening on %s (Ctrl-C to stop)\n", a.url)
			if a.gateway != nil {
				fmt.Fprintf(g.stdout, "ports gateway on %s (published ports: %s)\n",
					gatewayBaseURL(a.gateway, gw.certFile != "" || gw.publicHTTPS), portURLPattern(a.gateway, gw))
			}
			if a.gateway != nil && a.gateway.E2BAddr() != nil {
				fmt.Fprintf(g.stdout, "E2B-compatible API on http://%s\n", a.gateway.E2BAddr())
			}
			if a.layout != nil {
				fmt.Fprintf(g.stdout, "authentication on: account layout in %s\n", a.layout.Dir)
				for _, role := range []string{auth.RoleRouter, auth.RoleWorker, auth.RoleAuditor, auth.RoleReaper, auth.RoleAdmin, auth.RoleSys, auth.RoleGateway, auth.RoleE2B} {
					fmt.Fprintf(g.stdout, "  %-8s creds %s\n", role, a.layout.Creds(role))
				}
				for _, t := range a.tenants {
					fmt.Fprintf(g.stdout, "  tenant %s (account %s) creds %s\n", t.Name, t.Account, t.Creds)
				}
				if len(a.tenants) > 0 {
					fmt.Fprintf(g.stdout, "try: %s --nats %s --creds %s run --class fake -- echo hi\n", "sandboxio", a.url, a.tenants[0].Creds)
				}
			}
			select {
			case <-cmd.Context().Done():
			case err = <-a.errs:
			}
			log.Info("shutting down")
			a.stop()
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.dataDir, "data-dir", envOr("SBX_DATA_DIR", ".data"), "directory for JetStream data")
	f.StringVar(&cfg.listen, "listen", envOr("SBX_LISTEN", "127.0.0.1:4222"), "host:port for clients")
	f.StringVar(&cfg.routingFile, "routing", os.Getenv("SBX_ROUTING"), "routing YAML file (default: the built-in classes)")
	f.StringVar(&backends, "backends", envOr("SBX_BACKENDS", "docker,e2b,modal,fake"), "backends to start workers for; those that cannot run here are skipped with a warning")
	f.BoolVar(&cfg.killOnExit, "kill-on-exit", true, "kill every sandbox when dev stops")
	f.StringVar(&pprofAddr, "pprof", os.Getenv("SBX_PPROF_ADDR"), "serve net/http/pprof on this address, e.g. 127.0.0.1:6060 (for profiling under sandboxio bench)")
	f.StringVar(&gw.listen, "gateway", envOr("SBX_GATEWAY_LISTEN", defaultGatewayListen),
		"host:port of the ports gateway (another port is taken when the default is in use; empty: no gateway) (env SBX_GATEWAY_LISTEN)")
	f.StringVar(&gw.domain, "gateway-domain", envOr("SBX_GATEWAY_DOMAIN", defaultGatewayDomain),
		"the gateway's host routing domain: <port>-<sandbox>.DOMAIN (env SBX_GATEWAY_DOMAIN)")
	f.StringVar(&gw.e2bListen, "e2b-listen", os.Getenv("SBX_E2B_LISTEN"),
		"also serve the E2B-compatible API on this host:port, acting for tenants on the layout's e2b user with --auth (keys: sandboxio tenant key add) (env SBX_E2B_LISTEN)")
	f.StringVar(&reservedPorts, "reserved-ports", os.Getenv("SBX_RESERVED_PORTS"),
		"comma-separated ports no sandbox may publish, e.g. 22,2375 (env SBX_RESERVED_PORTS)")
	gw.limits = gateway.DefaultLimits
	gw.maxBody = "64MiB"
	gw.cookieTTL = gateway.DefaultCookieTTL
	f.BoolVar(&cfg.auth, "auth", os.Getenv("SBX_DEV_AUTH") == "1", "run the secure account layout (creds for the services and two example tenants under --data-dir/auth)")
	return cmd
}

func demoCmd(g *globals) *cobra.Command {
	var class, dsn, code string
	var backends string
	cmd := &cobra.Command{
		Use:   "demo [-- CMD...]",
		Short: "Start the all-in-one in-process, create a sandbox, run code with streamed output, remove the sandbox",
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("log-level") && os.Getenv("SBX_LOG_LEVEL") == "" {
				g.logLevel = "warn" // the demo's own narration is the output
			}
			log := g.logger()
			dir, err := os.MkdirTemp("", "sandboxio-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			// The system outlives an interrupt until the demo has killed
			// its sandbox through it: a.stop ends it, not the signal.
			a, err := startAllInOne(context.WithoutCancel(cmd.Context()), allInOneConfig{dataDir: dir, backends: splitList(backends), killOnExit: true}, log)
			if err != nil {
				return err
			}
			defer a.stop()
			nc, err := a.conn("sandboxio-demo")
			if err != nil {
				return err
			}
			cl, err := client.New(nc)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := waitForBackends(ctx, cl, 20*time.Second); err != nil {
				return err
			}
			if class == "" && dsn == "" {
				class = pickDemoClass(ctx, cl)
			}
			if len(args) == 0 {
				if class == "fake" {
					args = []string{"interleave", "3"}
				} else {
					args = []string{"python3", "-c", code}
				}
			}
			return runInSandbox(ctx, g, cl, events.CreateRequest{Class: class, DSN: dsn, TimeoutS: 300}, events.ExecRequest{Cmd: args}, true, false)
		},
	}
	f := cmd.Flags()
	f.StringVar(&class, "class", "", "sandbox class (default: standard when Docker is up, else fake)")
	f.StringVar(&dsn, "dsn", "", "sandbox dsn, e.g. docker://sandboxio/python:3.11")
	f.StringVar(&code, "code", demoCode, "Python code to run")
	f.StringVar(&backends, "backends", envOr("SBX_BACKENDS", "docker,fake"), "backends to start")
	return cmd
}

const demoCode = `import platform, sys, os
print("hello from a sandbox:", platform.python_implementation(), sys.version.split()[0])
print("uid", os.getuid(), "network interfaces", sorted(os.listdir("/sys/class/net")))
for i in range(3):
    print("tick", i, flush=True)
print("done", file=sys.stderr)
`

// pickDemoClass prefers the Docker class when a docker worker is live.
func pickDemoClass(ctx context.Context, cl *client.Client) string {
	b, err := cl.Backends(ctx)
	if err != nil {
		return "fake"
	}
	for _, x := range b.Backends {
		if x.Name == "docker" && len(x.Workers) > 0 {
			return "standard"
		}
	}
	return "fake"
}

func waitForBackends(ctx context.Context, cl *client.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		b, err := cl.Backends(ctx)
		if err == nil && len(b.Backends) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no backend became live within %s", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
