package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func lsCmd(g *globals) *cobra.Command {
	var backend, state string
	var meta []string
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md, err := keyValues(meta)
			if err != nil {
				return usageErr(err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			list, err := cl.List(cmd.Context(), events.ListRequest{Backend: backend, State: events.State(state), Metadata: md})
			if err != nil {
				return err
			}
			v := view{whole: list, table: func(w io.Writer) { sandboxesTable(w, list) }}
			for _, s := range list {
				v.items, v.ids = append(v.items, s), append(v.ids, s.SandboxID)
			}
			return out.print(g.stdout, v)
		},
	}
	cmd.Flags().StringVar(&backend, "backend", "", "only this backend")
	cmd.Flags().StringVar(&state, "state", "", "only this state (default: live ones)")
	cmd.Flags().StringArrayVar(&meta, "metadata", nil, "only sandboxes with KEY=VALUE")
	out.register(cmd, "table", "print only the sandbox ids", "{{.SandboxID}} {{.State}}")
	return cmd
}

// sandboxesTable renders sandbox records, one line each.
func sandboxesTable(w io.Writer, list []events.Sandbox) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tBACKEND\tCLASS\tSTATE\tDEADLINE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.SandboxID, s.Backend, s.Class, s.State, s.Deadline.Local().Format(time.RFC3339))
	}
	tw.Flush()
}

func getCmd(g *globals) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "get SANDBOX",
		Short: "Print a sandbox's record (JSON by default)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			s, err := cl.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return out.print(g.stdout, view{whole: s, items: []any{s}, ids: []string{s.SandboxID},
				table: func(w io.Writer) { sandboxesTable(w, []events.Sandbox{*s}) }})
		}),
	}
	out.register(cmd, "json", "print only the sandbox id", "{{.State}} {{.Deadline}}")
	return cmd
}

func backendsCmd(g *globals) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "Show live backends (tier, capabilities, workers) and classes",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, _ []string) error {
			b, err := cl.Backends(cmd.Context())
			if err != nil {
				return err
			}
			v := view{whole: b, table: func(w io.Writer) { backendsTable(w, b) }}
			for _, x := range b.Backends {
				v.items, v.ids = append(v.items, x), append(v.ids, x.Name)
			}
			return out.print(g.stdout, v)
		}),
	}
	out.register(cmd, "table", "print only the names of the live backends", "{{.Name}} {{.Isolation}}")
	return cmd
}

// backendsTable renders the backends and the classes; a worker's start
// time is shown only when it says one.
func backendsTable(w io.Writer, b *events.BackendsReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tISOLATION\tWORKERS\tLOAD\tCAPABILITIES")
	for _, x := range b.Backends {
		caps := make([]string, 0, len(x.Capabilities))
		for _, c := range x.Capabilities {
			caps = append(caps, string(c))
		}
		sort.Strings(caps)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\n", x.Name, x.Isolation, len(x.Workers), x.Load, x.Capacity, strings.Join(caps, ","))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tBACKEND\tHOST\tVERSION\tEXEC\tSTARTED\tHEARTBEAT")
	for _, x := range b.Backends {
		for _, l := range x.Workers {
			// EXEC: how the worker runs execs (docker: agent or docker-exec).
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Worker, l.Backend, dash(l.Host), dash(l.Version), dash(l.ExecPath), when(l.StartedAt), when(l.HeartbeatAt))
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tBACKEND\tREQUIRE\tDEFAULT")
	for _, c := range b.Classes {
		def := ""
		if c.Default {
			def = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Backend, dash(string(c.RequireIsolation)), def)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// when is a time for a table: "-" for none (never 0001-01-01).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func quotaCmd(g *globals) *cobra.Command {
	var asJSON bool
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show who the deployment says you are (your tenant), your limits and what you use now",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, _ []string) error {
			q, err := cl.Quota(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				out.format = "json"
			}
			return out.print(g.stdout, view{whole: q, items: []any{q}, ids: []string{q.Tenant}, table: func(w io.Writer) { printQuota(w, q) }})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "the same as --format json")
	out.register(cmd, "table", "print only the tenant", "{{.Tenant}}")
	return cmd
}

// printQuota renders a quota reply as a table: the tenant, then each limit
// with its usage.
func printQuota(w io.Writer, q *events.QuotaReply) {
	tenant := q.Tenant
	switch {
	case tenant == events.TenantOpen:
		tenant += " (not a tenant: open deployment or services account)"
	case q.Name != "":
		tenant += " (" + q.Name + ")"
	}
	fmt.Fprintf(w, "TENANT  %s\n\n", tenant)
	limit := func(n int64) string {
		if n < 0 {
			return "unlimited"
		}
		return fmt.Sprint(n)
	}
	fmt.Fprintf(w, "%-26s  %10s  %10s\n", "QUOTA", "USED", "LIMIT")
	fmt.Fprintf(w, "%-26s  %10d  %10s\n", "live sandboxes", q.Usage.Sandboxes, limit(int64(q.Limits.MaxSandboxes)))
	fmt.Fprintf(w, "%-26s  %10d  %10s\n", "concurrent execs", q.Usage.Execs, limit(int64(q.Limits.MaxExecs)))
	fmt.Fprintf(w, "%-26s  %10d  %10s\n", "sum of lifetimes (s)", q.Usage.LifetimeS, limit(q.Limits.MaxLifetimeS))
	fmt.Fprintf(w, "%-26s  %10d  %10s\n", "files stored (bytes)", q.Usage.StorageBytes, limit(q.Limits.MaxStorageBytes))
	fmt.Fprintf(w, "%-26s  %10d  %10s\n", "output stored (bytes)", q.Usage.OutputBytes, limit(q.Limits.MaxOutputBytes))
}
