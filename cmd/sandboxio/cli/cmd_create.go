package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
)

func createCmd(g *globals) *cobra.Command {
	var cf createFlags
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its description (JSON by default; -q: only its id)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := cf.request()
			if err != nil {
				return usageErr(err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			sb, err := cl.Create(cmd.Context(), req, client.WithProgress(func(msg string) { g.say("%s", msg) }))
			if err != nil {
				return err
			}
			g.sayPorts(cmd.Context(), cl, sb)
			r := &sb.CreateReply
			return out.print(g.stdout, view{whole: r, items: []any{r}, ids: []string{r.SandboxID}, table: func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SANDBOX\tBACKEND\tCLASS\tISOLATION\tDEADLINE")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.SandboxID, r.Backend, r.Class, r.Isolation, r.Deadline.Local().Format(time.RFC3339))
				tw.Flush()
			}})
		},
	}
	cf.register(cmd)
	out.register(cmd, "json", "print only the sandbox id", "{{.SandboxID}} {{.Isolation}}")
	return cmd
}

func killCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "kill SANDBOX...",
		Short: "Remove sandboxes (idempotent); every id is tried, and the exit is non-zero if one failed",
		Args:  cobra.MinimumNArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			var first error
			for _, id := range args {
				r, err := cl.Kill(cmd.Context(), id)
				if err != nil {
					fmt.Fprintf(g.stderr, "sandboxio: kill %s: %v\n", id, err)
					if first == nil {
						first = err
					}
					if unreachable(err) {
						break // the rest would fail the same way
					}
					continue
				}
				note := ""
				if r.AlreadyGone {
					note = " (already gone)"
				}
				fmt.Fprintf(g.stdout, "%s %s%s\n", r.SandboxID, r.State, note)
			}
			if first != nil {
				return reported{first}
			}
			return nil
		}),
	}
}

func setTimeoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set-timeout SANDBOX DURATION",
		Short: "Move a sandbox's deadline to now + DURATION (seconds, or 90s, 5m, 1h)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := client.ParseDuration(args[1])
			if err != nil {
				return usageErr(err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			dl, err := cl.SetTimeout(cmd.Context(), args[0], d)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%s deadline %s\n", args[0], dl.Local().Format(time.RFC3339))
			return nil
		},
	}
}
