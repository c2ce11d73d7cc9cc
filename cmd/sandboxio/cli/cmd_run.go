package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func runCmd(g *globals) *cobra.Command {
	var cf createFlags
	var ef execFlags
	cmd := &cobra.Command{
		Use:   "run [flags] CMD [ARG...]",
		Short: "Create a sandbox, run a command with streamed output, remove the sandbox; exit with the command's code",
		Long: `run creates a sandbox (--lifetime bounds it), runs CMD in it with its output streamed,
removes the sandbox and exits with CMD's exit code (124 when it ran past --exec-timeout,
126/127 when it cannot be run or does not exist, 125 for a sandboxio error, 69 when
sandboxio cannot be reached, 77 when the NATS server refuses the credentials). Flags go before CMD: "sandboxio run python3 -c 'print(1)'"
needs no "--". -i forwards stdin to CMD. The sandbox and process ids are printed on stderr.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := stripDashes(args)
			if len(argv) == 0 {
				return usageErr(fmt.Errorf("run: no command"))
			}
			req, err := cf.request()
			if err != nil {
				return usageErr(err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			g.warnStdin(ef.interactive)
			ereq := events.ExecRequest{Cmd: argv, Cwd: ef.cwd, TimeoutMS: ef.timeout.Milliseconds()}
			return runInSandbox(cmd.Context(), g, cl, req, ereq, false, ef.interactive)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cf.register(cmd)
	ef.register(cmd, false)
	withTTY(cmd)
	return cmd
}

// runInSandbox is `run` and `demo`: create, stream, kill.
func runInSandbox(ctx context.Context, g *globals, cl *client.Client, creq events.CreateRequest, ereq events.ExecRequest, narrate, interactive bool) error {
	say := func(format string, args ...any) {
		if narrate {
			g.say(format, args...)
		}
	}
	sb, err := cl.Create(ctx, creq, client.WithProgress(func(msg string) { g.say("%s", msg) }))
	if err != nil {
		return err
	}
	say("sandbox %s created (backend %s, class %s, isolation %s)", sb.SandboxID, sb.Backend, sb.Class, sb.Isolation)
	for _, w := range sb.Warnings {
		g.say("warning: %s", w)
	}
	g.sayPorts(ctx, cl, sb)
	defer func() {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if r, err := cl.Kill(kctx, sb.SandboxID); err != nil {
			g.say("kill %s: %v", sb.SandboxID, err)
		} else {
			say("sandbox %s %s", r.SandboxID, r.State)
		}
	}()
	ereq.SandboxID = sb.SandboxID
	ereq.ProcessID = events.NewID()
	announce := fmt.Sprintf("process %s in sandbox %s", ereq.ProcessID, sb.SandboxID)
	if narrate {
		say("running %q with streamed output (process %s)", shortCmd(ereq.Cmd), ereq.ProcessID)
		announce = ""
	}
	return streamExec(ctx, g, cl, ereq, interactive, announce)
}
