package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// tenantKeyCmd is `sandboxio tenant key add|rm|ls`: the API keys of the
// E2B-compatible front door, stored hashed in sbx_apikeys (admin creds).
func tenantKeyCmd(g *globals) *cobra.Command {
	keyCmd := &cobra.Command{Use: "key", Short: "API keys of the E2B-compatible API (e2b_<hex>), each acting for one tenant"}
	var dir, account string
	var asJSON bool
	// bucket connects with the layout's admin creds (--dir) or this
	// invocation's, and opens sbx_apikeys (made by `bus init`).
	bucket := func(ctx context.Context) (jetstream.KeyValue, func(), error) {
		o := g.natsOptions("sandboxio-tenant-key")
		if dir != "" {
			l, err := auth.Load(dir)
			if err != nil {
				return nil, nil, err
			}
			o.Creds, o.NKey, o.User, o.Password, o.Token, o.Context = l.Creds(auth.RoleAdmin), "", "", "", "", ""
		}
		nc, err := natsconn.Connect(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		kv, err := js.KeyValue(ctx, e2bapi.BucketAPIKeys)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("bucket %s: %w (run `sandboxio bus init`)", e2bapi.BucketAPIKeys, err)
		}
		return kv, nc.Close, nil
	}
	addCmd := &cobra.Command{
		Use:   "add TENANT",
		Short: "Issue an API key for a tenant and print it (once: only its hash is stored)",
		Long: `add issues an API key (e2b_ and 40 hex digits) that the E2B-compatible API serves as
TENANT: its sandboxes, its quotas. TENANT is a tenant of the layout --dir (its
account is looked up there), or, with --account, any tenant account (an open
deployment's tenant names are free). The key is printed once; sbx_apikeys keeps
only its SHA-256.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, acc := args[0], account
			if acc == "" {
				if dir == "" {
					return usageErr(errors.New("give --dir (the layout holding the tenant) or --account"))
				}
				t, err := auth.LoadTenant(dir, name)
				if err != nil {
					return err
				}
				acc = t.Account
			}
			ctx, cancel := context.WithTimeout(ctxOf(cmd), 30*time.Second)
			defer cancel()
			kv, done, err := bucket(ctx)
			if err != nil {
				return err
			}
			defer done()
			key, rec, err := e2bapi.AddKey(ctx, kv, acc, name)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.stdout, map[string]any{"key": key, "id": e2bapi.KeyID(key), "record": rec})
			}
			fmt.Fprintf(g.stdout, "%s\n", key)
			fmt.Fprintf(g.stderr, "API key for tenant %s (account %s); it is not shown again. id %s\n", name, acc, e2bapi.KeyID(key))
			return nil
		},
	}
	rmCmd := &cobra.Command{
		Use:   "rm KEY|ID|HINT",
		Short: "Remove an API key, named by itself, its id or its hint (e2b_ and 6 hex digits)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(ctxOf(cmd), 30*time.Second)
			defer cancel()
			kv, done, err := bucket(ctx)
			if err != nil {
				return err
			}
			defer done()
			k, err := e2bapi.RemoveKey(ctx, kv, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "removed %s (%s, tenant %s)\n", k.ID, k.Hint, k.Name)
			return nil
		},
	}
	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List the API keys (hints and tenants, never the keys)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(ctxOf(cmd), 30*time.Second)
			defer cancel()
			kv, done, err := bucket(ctx)
			if err != nil {
				return err
			}
			defer done()
			keys, err := e2bapi.ListKeys(ctx, kv)
			if err != nil {
				return err
			}
			if asJSON {
				if keys == nil {
					keys = []e2bapi.StoredKey{}
				}
				return printJSON(g.stdout, keys)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HINT\tTENANT\tACCOUNT\tCREATED\tID")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s…\t%s\t%s\t%s\t%s\n", k.Hint, k.Name, k.Tenant, k.CreatedAt.Format(time.RFC3339), k.ID)
			}
			return tw.Flush()
		},
	}
	for _, c := range []*cobra.Command{addCmd, rmCmd, lsCmd} {
		c.Flags().StringVar(&dir, "dir", envOr("SBX_AUTH_DIR", ""), "the layout directory of `auth init`: its tenants, and its admin creds to write the keys (env SBX_AUTH_DIR)")
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	addCmd.Flags().StringVar(&account, "account", "", "the tenant's account (NATS account public key, or any tenant name on an open deployment) instead of looking TENANT up in --dir")
	keyCmd.AddCommand(addCmd, rmCmd, lsCmd)
	return keyCmd
}
