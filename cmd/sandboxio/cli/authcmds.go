package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func authCmds(g *globals) []*cobra.Command {
	authCmd := &cobra.Command{Use: "auth", Short: "Create the NATS account layout (operator, accounts, service users)"}
	var dir, resolverDir string
	var workers []string
	var ifMissing bool
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Write the operator, the SYS and SVC accounts, the services' creds, keys and a nats-server config into --dir",
		Long: `init writes, into --dir, the operator "sandboxio", the system account SYS, the
services account SVC with one user per role (router, worker, auditor, reaper,
admin, gateway, and e2b: the E2B-compatible front door's) and a SYS user, each
as a creds file; the backends' xkey seed (seal.xk),
one record-signing seed per worker and signers.txt; the routers' and gateways'
port link key (keys/port-link.key); and nats-server.conf, which a
stock "nats-server -c FILE -js" and "sandboxio nats-server --config FILE" load.
Seeds and creds are files of mode 0600: keep --dir secret. See docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, wrote, err := auth.InitWith(dir, auth.InitOptions{Workers: workers, ResolverDir: resolverDir})
			if errors.Is(err, auth.ErrExists) && ifMissing {
				// A layout older than the port link key or the e2b user
				// gets them.
				keyAdded, err := auth.EnsurePortLinkKey(dir)
				if err != nil {
					return err
				}
				credsAdded, err := auth.EnsureE2BCreds(dir)
				if err != nil {
					return err
				}
				if keyAdded {
					fmt.Fprintf(g.stdout, "%s already holds a layout; added its port link key\n", dir)
				}
				if credsAdded {
					fmt.Fprintf(g.stdout, "%s already holds a layout; added the e2b front door's creds\n", dir)
				}
				if !keyAdded && !credsAdded {
					fmt.Fprintf(g.stdout, "%s already holds a layout; left as it is\n", dir)
				}
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "operator %s\nSYS account %s\nSVC account %s\n", l.Operator, l.SYS, l.SVC)
			for _, w := range wrote {
				tag := ""
				if w.Secret {
					tag = " (secret, 0600)"
				}
				fmt.Fprintf(g.stdout, "wrote %s: %s%s\n", w.Path, w.What, tag)
			}
			fmt.Fprintf(g.stdout, "next: sandboxio tenant add NAME --dir %s\n", dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", envOr("SBX_AUTH_DIR", "sandboxio-auth"), "directory for the layout (env SBX_AUTH_DIR)")
	initCmd.Flags().StringSliceVar(&workers, "workers", auth.DefaultWorkers, "workers to write a record-signing key for")
	initCmd.Flags().StringVar(&resolverDir, "resolver-dir", "", "resolver directory to name in nats-server.conf, e.g. on each cluster node's own volume (default DIR/resolver)")
	initCmd.Flags().BoolVar(&ifMissing, "if-missing", false, "when --dir already holds a layout, only add what an older layout lacks (the port link key, the e2b creds) and succeed (init containers)")
	authCmd.AddCommand(initCmd)

	tenantCmd := &cobra.Command{Use: "tenant", Short: "Create and list tenants (one NATS account each)"}
	var tdir string
	var maxSandboxes, maxExecs, replicas int
	var maxLifetime string
	var addTenant func(name string) error
	var addCmd *cobra.Command
	var push, tIfMissing bool
	addCmd = &cobra.Command{
		Use:   "add NAME...",
		Short: "Create a tenant account and its user's creds; with --push, tell a running server and store its quotas",
		Long: `add creates the tenant's account (it can reach only the client API, its own inbox
and its own output) and writes creds/tenants/NAME.creds under --dir. With --push it
also sends the account to the server at --nats (with the layout's SYS creds, so no
restart is needed) and stores the tenant's quotas in the KV bucket sbx_tenants
(with the layout's admin creds). Without --push a server started later loads the
account from the resolver directory; store the quotas then with --push.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				if err := addTenant(name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	addTenant = func(name string) error {
		{
			limits := events.TenantLimits{MaxSandboxes: maxSandboxes, MaxExecs: maxExecs}
			if maxLifetime != "" && maxLifetime != "0" {
				if maxLifetime == "-1" {
					limits.MaxLifetimeS = -1
				} else {
					d, err := client.ParseDuration(maxLifetime)
					if err != nil || d <= 0 {
						return usageErr(fmt.Errorf("--max-lifetime %q: want seconds or a duration such as 50h, or -1 for unlimited", maxLifetime))
					}
					limits.MaxLifetimeS = int64(d / time.Second)
				}
			}
			t, err := auth.AddTenant(tdir, name, limits)
			if errors.Is(err, auth.ErrExists) && (push || tIfMissing) {
				// Pushing again is how a tenant created offline reaches a server.
				t, err = auth.LoadTenant(tdir, name)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "tenant %s account %s\ncreds %s\n", t.Name, t.Account, t.Creds)
			if !push {
				return nil
			}
			l, err := auth.Load(tdir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctxOf(addCmd), 30*time.Second)
			defer cancel()
			if err := g.pushTenant(ctx, l, t, replicas); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "pushed account %s and stored its quotas in %s\n", t.Account, events.BucketTenants)
			return nil
		}
	}
	af := addCmd.Flags()
	af.StringVar(&tdir, "dir", envOr("SBX_AUTH_DIR", "sandboxio-auth"), "the layout directory of `auth init` (env SBX_AUTH_DIR)")
	af.IntVar(&maxSandboxes, "max-sandboxes", 0, "live sandboxes (0: the router's default, -1: unlimited)")
	af.IntVar(&maxExecs, "max-execs", 0, "concurrent execs (0: the router's default, -1: unlimited)")
	af.StringVar(&maxLifetime, "max-lifetime", "", "sum of the live sandboxes' lifetimes: seconds or a duration such as 50h (empty: the router's default, -1: unlimited)")
	af.BoolVar(&push, "push", false, "push the account to the server at --nats and store the quotas in sbx_tenants")
	af.IntVar(&replicas, "replicas", 1, "replicas of the sbx_tenants bucket if it must be created")
	af.BoolVar(&tIfMissing, "if-missing", false, "succeed without change for a tenant that exists (init containers)")

	var lsJSON bool
	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List the tenants of --dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := auth.Tenants(tdir)
			if err != nil {
				return err
			}
			if lsJSON {
				recs := make([]events.TenantRecord, 0, len(ts))
				for _, t := range ts {
					recs = append(recs, t.Record)
				}
				return printJSON(g.stdout, recs)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tACCOUNT\tMAX SANDBOXES\tMAX EXECS\tMAX LIFETIME\tCREDS")
			for _, t := range ts {
				l := t.Record.Limits
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Account, limit(int64(l.MaxSandboxes), ""),
					limit(int64(l.MaxExecs), ""), limit(l.MaxLifetimeS, "s"), t.Creds)
			}
			return tw.Flush()
		},
	}
	lsCmd.Flags().StringVar(&tdir, "dir", envOr("SBX_AUTH_DIR", "sandboxio-auth"), "the layout directory (env SBX_AUTH_DIR)")
	lsCmd.Flags().BoolVar(&lsJSON, "json", false, "print the tenant records as JSON")
	tenantCmd.AddCommand(addCmd, lsCmd, tenantKeyCmd(g))
	return []*cobra.Command{authCmd, tenantCmd, busCmd(g)}
}

// busCmd is `sandboxio bus init`: the operator's step that creates the
// streams and buckets and sets their configuration, as admin. No service
// credential may (ADR 35).
func busCmd(g *globals) *cobra.Command {
	busCmd := &cobra.Command{Use: "bus", Short: "Set up the bus (streams and buckets)"}
	var replicas int
	var dir string
	limits := busLimitFlags{}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the streams and buckets, or bring them to this configuration (admin creds: no service may)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := bus.Config{Owner: true, Replicas: replicas, Logger: g.logger()}
			if err := limits.apply(&c); err != nil {
				return err
			}
			o := g.natsOptions("sandboxio-bus-init")
			if dir != "" {
				l, err := auth.Load(dir)
				if err != nil {
					return err
				}
				o.Creds, o.NKey, o.User, o.Password, o.Token, o.Context = l.Creds(auth.RoleAdmin), "", "", "", "", ""
			}
			ctx, cancel := context.WithTimeout(ctxOf(cmd), 2*time.Minute)
			defer cancel()
			nc, err := natsconn.Connect(ctx, o)
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			if err := bus.EnsureWithRetry(ctx, js, c); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "bus ready: %d streams, %d buckets, object store %s, %d replicas\n",
				len(c.StreamConfigs()), len(c.KeyValueConfigs()), events.BucketFiles, max(replicas, 1))
			return nil
		},
	}
	initCmd.Flags().IntVar(&replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	limits.register(initCmd.Flags())
	initCmd.Flags().StringVar(&dir, "dir", os.Getenv("SBX_AUTH_DIR"), "connect with the admin creds of this auth layout (default: --creds; env SBX_AUTH_DIR)")
	busCmd.AddCommand(initCmd)
	return busCmd
}

func ctxOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func limit(v int64, unit string) string {
	switch {
	case v == 0:
		return "default"
	case v < 0:
		return "unlimited"
	}
	return strconv.FormatInt(v, 10) + unit
}

// pushTenant sends the tenant's account JWT to the server (SYS creds) and
// stores its record in sbx_tenants (admin creds). The URL and TLS settings
// are this invocation's; the credentials are the layout's.
func (g *globals) pushTenant(ctx context.Context, l *auth.Layout, t *auth.Tenant, replicas int) error {
	dial := func(role string) (*nats.Conn, error) {
		o := g.natsOptions("sandboxio-tenant-" + role)
		o.Creds, o.NKey, o.User, o.Password, o.Token, o.Context = l.Creds(role), "", "", "", "", ""
		return natsconn.Connect(ctx, o)
	}
	sys, err := dial(auth.RoleSys)
	if err != nil {
		return err
	}
	defer sys.Close()
	if err := auth.Push(ctx, sys, t.JWT); err != nil {
		return err
	}
	admin, err := dial(auth.RoleAdmin)
	if err != nil {
		return err
	}
	defer admin.Close()
	return storeTenant(ctx, admin, t.Record, replicas)
}

// storeTenant puts a tenant record into sbx_tenants, creating the bucket
// if it is missing.
func storeTenant(ctx context.Context, nc *nats.Conn, rec events.TenantRecord, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return auth.StoreRecord(ctx, js, rec, replicas)
}
