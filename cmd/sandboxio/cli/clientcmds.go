package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func (g *globals) client() (*client.Client, error) {
	return g.newClient()
}

// withClient adapts a client command: connect, run f, close.
func (g *globals) withClient(f func(cmd *cobra.Command, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cl, err := g.client()
		if err != nil {
			return err
		}
		defer cl.Close()
		return f(cmd, cl, args)
	}
}

// withConn adapts a command that needs a bare NATS connection named name.
func (g *globals) withConn(name string, f func(cmd *cobra.Command, nc *nats.Conn, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		nc, err := g.connect(name)
		if err != nil {
			return err
		}
		defer nc.Close()
		return f(cmd, nc, args)
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type createFlags struct {
	class, dsn, isolation, egress string
	timeoutS                      int
	env, metadata, allow          []string
	requires                      []string
}

func (f *createFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.class, "class", "", "sandbox class from the routing file (default: the default class)")
	fl.StringVar(&f.dsn, "dsn", "", "docker://IMAGE, e2b://TEMPLATE or fake://")
	fl.IntVar(&f.timeoutS, "timeout", 300, "sandbox lifetime in seconds (mandatory, default 300)")
	fl.StringVar(&f.isolation, "require-isolation", "", "minimum isolation tier: container, gvisor, microvm")
	fl.StringVar(&f.egress, "egress", "deny", "network egress: deny or allow")
	fl.StringSliceVar(&f.allow, "allow", nil, "egress allowlist entries (hosts or CIDRs; backend must support it)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable NAME=VALUE")
	fl.StringArrayVar(&f.metadata, "metadata", nil, "metadata KEY=VALUE")
	fl.StringSliceVar(&f.requires, "requires", nil, "capabilities the backend must have")
}

func (f *createFlags) request() (events.CreateRequest, error) {
	env, err := keyValues(f.env)
	if err != nil {
		return events.CreateRequest{}, err
	}
	md, err := keyValues(f.metadata)
	if err != nil {
		return events.CreateRequest{}, err
	}
	req := events.CreateRequest{Class: f.class, DSN: f.dsn, TimeoutS: f.timeoutS,
		RequireIsolation: events.IsolationTier(f.isolation), Env: env, Metadata: md}
	if f.egress != "deny" || len(f.allow) > 0 {
		req.Network = &events.NetworkPolicy{Egress: f.egress, Allow: f.allow}
	}
	for _, c := range f.requires {
		req.Requires = append(req.Requires, events.Capability(c))
	}
	return req, nil
}

func keyValues(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}

func clientCmds(g *globals) []*cobra.Command {
	var cf createFlags
	var execTimeout time.Duration
	var cwd string
	runCmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Create a sandbox, run a command with streamed output, remove the sandbox; exit with the command's code",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := cf.request()
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			return runInSandbox(cmd.Context(), g, cl, req, events.ExecRequest{Cmd: args, Cwd: cwd, TimeoutMS: execTimeout.Milliseconds()}, false)
		},
	}
	cf.register(runCmd)
	runCmd.Flags().DurationVar(&execTimeout, "exec-timeout", 0, "kill the command after this long")
	runCmd.Flags().StringVar(&cwd, "cwd", "", "working directory")

	var cf2 createFlags
	createCmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its description as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := cf2.request()
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			r, err := cl.CreateWatch(cmd.Context(), req, func(msg string) { fmt.Fprintf(g.stderr, "sandboxio: %s\n", msg) })
			if err != nil {
				return err
			}
			return printJSON(g.stdout, r)
		},
	}
	cf2.register(createCmd)

	var execEnv []string
	var execCwd string
	var execT time.Duration
	var buffered, keepStdin bool
	execCmd := &cobra.Command{
		Use:   "exec SANDBOX -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exit with its code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := keyValues(execEnv)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			req := events.ExecRequest{SandboxID: args[0], Cmd: args[1:], Env: env, Cwd: execCwd, TimeoutMS: execT.Milliseconds()}
			if buffered {
				res, err := cl.Exec(cmd.Context(), req)
				if res != nil {
					g.stdout.Write(res.Stdout)
					g.stderr.Write(res.Stderr)
				}
				if err != nil {
					return err
				}
				return exitCode(res.ExitCode)
			}
			return streamExec(cmd.Context(), g, cl, req, keepStdin)
		},
	}
	execCmd.Flags().StringArrayVarP(&execEnv, "env", "e", nil, "environment variable NAME=VALUE")
	execCmd.Flags().StringVar(&execCwd, "cwd", "", "working directory")
	execCmd.Flags().DurationVar(&execT, "timeout", 0, "kill the command after this long")
	execCmd.Flags().BoolVar(&buffered, "buffered", false, "wait and print the whole output at the end (non-streamed exec)")
	execCmd.Flags().BoolVarP(&keepStdin, "interactive", "i", false, "forward this terminal's stdin to the command")

	attachCmd := &cobra.Command{
		Use:   "attach SANDBOX PROCESS",
		Short: "Replay and follow a streamed process's output from the start",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			p, err := cl.Attach(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return copyOutput(g, p, false)
		}),
	}

	var lsBackend, lsState string
	var lsMeta []string
	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md, err := keyValues(lsMeta)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			list, err := cl.List(cmd.Context(), events.ListRequest{Backend: lsBackend, State: events.State(lsState), Metadata: md})
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "%-26s  %-8s  %-10s  %-9s  %s\n", "SANDBOX", "BACKEND", "CLASS", "STATE", "DEADLINE")
			for _, s := range list {
				fmt.Fprintf(g.stdout, "%-26s  %-8s  %-10s  %-9s  %s\n", s.SandboxID, s.Backend, s.Class, s.State, s.Deadline.Local().Format(time.RFC3339))
			}
			return nil
		},
	}
	lsCmd.Flags().StringVar(&lsBackend, "backend", "", "only this backend")
	lsCmd.Flags().StringVar(&lsState, "state", "", "only this state (default: live ones)")
	lsCmd.Flags().StringArrayVar(&lsMeta, "metadata", nil, "only sandboxes with KEY=VALUE")

	getCmd := &cobra.Command{
		Use:   "get SANDBOX",
		Short: "Print a sandbox's record as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			s, err := cl.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(g.stdout, s)
		}),
	}

	killCmd := &cobra.Command{
		Use:   "kill SANDBOX...",
		Short: "Remove sandboxes (idempotent)",
		Args:  cobra.MinimumNArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			for _, id := range args {
				r, err := cl.Kill(cmd.Context(), id)
				if err != nil {
					return err
				}
				note := ""
				if r.AlreadyGone {
					note = " (already gone)"
				}
				fmt.Fprintf(g.stdout, "%s %s%s\n", r.SandboxID, r.State, note)
			}
			return nil
		}),
	}

	setTimeoutCmd := &cobra.Command{
		Use:   "set-timeout SANDBOX DURATION",
		Short: "Move a sandbox's deadline to now + DURATION",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[1])
			if err != nil {
				return err
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

	backendsCmd := &cobra.Command{
		Use:   "backends",
		Short: "Show live backends (tier, capabilities, workers) and classes",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, _ []string) error {
			b, err := cl.Backends(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(g.stdout, b)
		}),
	}

	var quotaJSON bool
	quotaCmd := &cobra.Command{
		Use:   "quota",
		Short: "Show who the deployment says you are (your tenant), your limits and what you use now",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, _ []string) error {
			q, err := cl.Quota(cmd.Context())
			if err != nil {
				return err
			}
			if quotaJSON {
				return printJSON(g.stdout, q)
			}
			printQuota(g.stdout, q)
			return nil
		}),
	}
	quotaCmd.Flags().BoolVar(&quotaJSON, "json", false, "print the reply as JSON")
	return []*cobra.Command{runCmd, createCmd, execCmd, attachCmd, lsCmd, getCmd, killCmd, setTimeoutCmd, backendsCmd, quotaCmd}
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
}

func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return exitError{code: code}
}

// runInSandbox is `run` and `demo`: create, stream, kill.
func runInSandbox(ctx context.Context, g *globals, cl *client.Client, creq events.CreateRequest, ereq events.ExecRequest, narrate bool) error {
	say := func(format string, args ...any) {
		if narrate {
			fmt.Fprintf(g.stderr, "sandboxio: "+format+"\n", args...)
		}
	}
	sb, err := cl.CreateWatch(ctx, creq, func(msg string) { fmt.Fprintf(g.stderr, "sandboxio: %s\n", msg) })
	if err != nil {
		return err
	}
	say("sandbox %s created (backend %s, class %s, isolation %s)", sb.SandboxID, sb.Backend, sb.Class, sb.Isolation)
	for _, w := range sb.Warnings {
		fmt.Fprintf(g.stderr, "sandboxio: warning: %s\n", w)
	}
	defer func() {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if r, err := cl.Kill(kctx, sb.SandboxID); err != nil {
			fmt.Fprintf(g.stderr, "sandboxio: kill %s: %v\n", sb.SandboxID, err)
		} else {
			say("sandbox %s %s", r.SandboxID, r.State)
		}
	}()
	ereq.SandboxID = sb.SandboxID
	shown := strings.Join(ereq.Cmd, " ")
	if first, _, multi := strings.Cut(shown, "\n"); multi || len(first) > 72 {
		shown = first[:min(len(first), 72)] + " …"
	}
	say("running %q with streamed output", shown)
	return streamExec(ctx, g, cl, ereq, false)
}

func streamExec(ctx context.Context, g *globals, cl *client.Client, req events.ExecRequest, interactive bool) error {
	req.KeepStdinOpen = interactive
	p, err := cl.Stream(ctx, req)
	if err != nil {
		return err
	}
	if interactive {
		go forwardStdin(ctx, g, cl, p)
	}
	return copyOutput(g, p, true)
}

// forwardStdin copies this terminal's stdin to the process, flow
// controlled (client.StdinWriter waits while the process reads slower than
// it is fed), then closes it. A refusal other than the process ending is
// printed with its code, never dropped silently.
func forwardStdin(ctx context.Context, g *globals, cl *client.Client, p *client.Process) {
	w := cl.Stdin(ctx, p.SandboxID, p.ProcessID)
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				stdinFailed(g, werr)
				return
			}
		}
		if err != nil {
			if cerr := w.Close(); cerr != nil {
				stdinFailed(g, cerr)
			}
			return
		}
	}
}

// stdinFailed reports a stdin write that failed, unless the process ended
// (its exit is reported by the output) or the command was cancelled.
func stdinFailed(g *globals, err error) {
	if errors.Is(err, events.ErrProcessNotFound) || errors.Is(err, events.ErrProcessExited) || errors.Is(err, context.Canceled) {
		return
	}
	fmt.Fprintf(g.stderr, "sandboxio: stdin not delivered: %v\n", err)
}

func copyOutput(g *globals, p *client.Process, killOnError bool) error {
	defer p.Close()
	for c, err := range p.Chunks() {
		if err != nil {
			return err
		}
		if c.Missing > 0 {
			fmt.Fprintf(g.stderr, "sandboxio: %d chunk(s) of %s lost to retention before they were read\n", c.Missing, c.Stream)
		}
		if c.Stream == events.Stderr {
			g.stderr.Write(c.Data)
		} else {
			g.stdout.Write(c.Data)
		}
	}
	res, err := p.Wait()
	if res != nil && res.Truncated {
		fmt.Fprintf(g.stderr, "sandboxio: output truncated at the stream cap\n")
	}
	if err != nil {
		return err
	}
	return exitCode(res.ExitCode)
}
