package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// durableFlags are create's durable options.
type durableFlags struct {
	fromSnapshot, onDeadline string
	autoResume               bool
}

func (f *durableFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.fromSnapshot, "from-snapshot", "", "start from a snapshot (a fork): its files before the first exec")
	fl.StringVar(&f.onDeadline, "on-deadline", "", "at the end of the lifetime: kill (default) or pause")
	fl.BoolVar(&f.autoResume, "auto-resume", false, "an operation on the paused sandbox resumes it first")
}

func (f *durableFlags) apply(r *events.CreateRequest) {
	r.FromSnapshot, r.OnDeadline, r.AutoResume = f.fromSnapshot, f.onDeadline, f.autoResume
}

func pauseCmd(g *globals) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "pause SANDBOX",
		Short: "Pause a sandbox: its files are kept in a snapshot and its container removed (running processes and memory are not kept)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			r, err := cl.Pause(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printDurable(g.stdout, quiet, view{whole: r, items: []any{r}, ids: []string{r.SnapshotID}, table: func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SANDBOX\tSTATE\tSNAPSHOT\tBYTES\tKEPT")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s (no memory, no processes)\n", r.SandboxID, r.State, r.SnapshotID, r.Bytes, r.Content)
				tw.Flush()
			}})
		}),
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot id")
	return cmd
}

func resumeCmd(g *globals) *cobra.Command {
	var quiet bool
	var lifetime time.Duration
	cmd := &cobra.Command{
		Use:   "resume SANDBOX",
		Short: "Resume a paused sandbox on any worker of its backend, with its files, env, secrets, network and metadata",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			r, err := cl.Resume(cmd.Context(), args[0], lifetime)
			if err != nil {
				return err
			}
			return printDurable(g.stdout, quiet, view{whole: r, items: []any{r}, ids: []string{r.SandboxID}, table: func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SANDBOX\tSTATE\tWORKER\tDEADLINE")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.SandboxID, r.State, r.Worker, r.Deadline.Local().Format(time.RFC3339))
				tw.Flush()
			}})
		}),
	}
	durationVar(cmd.Flags(), &lifetime, "lifetime", 0, "new lifetime (default: the one it was created with)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the sandbox id")
	return cmd
}

func snapshotCmd(g *globals) *cobra.Command {
	var quiet bool
	var name string
	cmd := &cobra.Command{
		Use:   "snapshot SANDBOX",
		Short: "Snapshot a running sandbox's files (it keeps running); create --from-snapshot forks from it",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			s, err := cl.Snapshot(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			return printDurable(g.stdout, quiet, view{whole: s, items: []any{s}, ids: []string{s.SnapshotID},
				table: func(w io.Writer) { snapshotsTable(w, []events.SnapshotInfo{*s}) }})
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot id")
	return cmd
}

func snapshotsCmd(g *globals) *cobra.Command {
	var quiet bool
	var sandbox string
	cmd := &cobra.Command{
		Use:   "snapshots [rm SNAPSHOT...]",
		Short: "List your snapshots (newest first), or delete some with rm",
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			if len(args) > 0 {
				if args[0] != "rm" || len(args) < 2 {
					return usageErr(fmt.Errorf("usage: snapshots [rm SNAPSHOT...]"))
				}
				var first error
				for _, id := range args[1:] {
					if _, err := cl.DeleteSnapshot(cmd.Context(), id); err != nil {
						fmt.Fprintf(g.stderr, "sandboxio: snapshots rm %s: %v\n", id, err)
						if first == nil {
							first = err
						}
						continue
					}
					fmt.Fprintf(g.stdout, "%s deleted\n", id)
				}
				if first != nil {
					return reported{first}
				}
				return nil
			}
			list, err := cl.Snapshots(cmd.Context(), events.SnapshotsListRequest{SandboxID: sandbox})
			if err != nil {
				return err
			}
			items, ids := make([]any, len(list)), make([]string, len(list))
			for i := range list {
				items[i], ids[i] = list[i], list[i].SnapshotID
			}
			return printDurable(g.stdout, quiet, view{whole: list, items: items, ids: ids, table: func(w io.Writer) { snapshotsTable(w, list) }})
		}),
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "only this sandbox's snapshots")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the snapshot ids")
	return cmd
}

func snapshotsTable(w io.Writer, list []events.SnapshotInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tNAME\tSANDBOX\tKIND\tBYTES\tFILES\tCREATED\tEXPIRES")
	for _, s := range list {
		exp := "-"
		if s.ExpiresAt != nil {
			exp = s.ExpiresAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.SnapshotID, s.Name, s.SandboxID, s.Kind, s.Bytes, s.Files,
			s.CreatedAt.Local().Format(time.RFC3339), exp)
	}
	tw.Flush()
}

// printDurable prints ids only (quiet) or a table.
func printDurable(w io.Writer, quiet bool, v view) error {
	if quiet {
		for _, id := range v.ids {
			fmt.Fprintln(w, id)
		}
		return nil
	}
	v.table(w)
	return nil
}
