package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// execFlags are the process flags of run and exec.
type execFlags struct {
	env         []string
	cwd         string
	timeout     time.Duration
	interactive bool
}

// register adds the flags; withEnv adds -e (run has the sandbox's).
func (f *execFlags) register(cmd *cobra.Command, withEnv bool) {
	fl := cmd.Flags()
	if withEnv {
		fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable NAME=VALUE")
	}
	fl.StringVar(&f.cwd, "cwd", "", "working directory")
	durationVar(fl, &f.timeout, "exec-timeout", 0, "kill the command after this long (exit 124): seconds (30) or a duration (90s, 5m); 0 is none")
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "forward stdin to the command (a pipe, a file or the terminal)")
}

func execCmd(g *globals) *cobra.Command {
	var f execFlags
	var buffered bool
	cmd := &cobra.Command{
		Use:   "exec [flags] SANDBOX CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exit with its code",
		Long: `exec runs CMD in SANDBOX with its output streamed as it is written, and exits with
its exit code: 124 when it ran past --exec-timeout, 126 when it cannot be run, 127 when it
does not exist, 125 for any other sandboxio error, 69 when sandboxio cannot be reached,
77 when the NATS server refuses the credentials.
Flags go before SANDBOX; everything after it is the command (a "--" is allowed).
The process id is printed on stderr while the process runs: once it started (streamed; for
attach), or once the sandbox was found and the command sent (--buffered, whose output is not
streamed, so not attachable: the id names it for the API's signal and in the audit records).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := stripDashes(args[1:])
			if len(argv) == 0 {
				return usageErr(fmt.Errorf("exec: no command after the sandbox id"))
			}
			env, err := keyValues(f.env)
			if err != nil {
				return usageErr(err)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			g.warnStdin(f.interactive)
			req := events.ExecRequest{SandboxID: args[0], Cmd: argv, Env: env, Cwd: f.cwd, TimeoutMS: f.timeout.Milliseconds(), ProcessID: events.NewID()}
			announce := fmt.Sprintf("process %s in sandbox %s", req.ProcessID, req.SandboxID)
			if buffered {
				return bufferedExec(cmd.Context(), g, cl, req, announce)
			}
			return streamExec(cmd.Context(), g, cl, req, f.interactive, announce)
		},
	}
	cmd.Flags().SetInterspersed(false)
	f.register(cmd, true)
	cmd.Flags().Var(durationValue{&f.timeout}, "timeout", "the same as --exec-timeout")
	_ = cmd.Flags().MarkDeprecated("timeout", "use --exec-timeout (the process timeout; a sandbox's lifetime is --lifetime)")
	cmd.Flags().BoolVar(&buffered, "buffered", false, "wait and print the whole output at the end (non-streamed exec)")
	withTTY(cmd)
	return cmd
}

// bufferedExec runs req as one request and prints its output at the end.
// Its reply comes only when the process ended, so the process line is
// said once the sandbox is known to exist, before the command is sent: a
// sandbox that does not exist gets no line.
func bufferedExec(ctx context.Context, g *globals, cl *client.Client, req events.ExecRequest, announce string) error {
	sb, err := cl.Get(ctx, req.SandboxID)
	if err != nil {
		return err
	}
	if sb.State == events.StateRunning {
		g.say("%s", announce)
	}
	res, err := cl.Exec(ctx, req)
	if res != nil {
		g.stdout.Write(res.Stdout)
		g.stderr.Write(res.Stderr)
	}
	if err != nil {
		return err
	}
	return exitCode(res.ExitCode)
}

func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return exitError{code: code}
}

// streamExec runs req streamed; announce (the process id, for attach) is
// said once the process started, never for one that does not exist.
func streamExec(ctx context.Context, g *globals, cl *client.Client, req events.ExecRequest, interactive bool, announce string) error {
	if ttyRequested(ctx) {
		return ttyExec(ctx, g, cl, req, announce)
	}
	req.KeepStdinOpen = interactive && g.stdin != nil
	p, err := cl.Stream(ctx, req)
	if err != nil {
		return err
	}
	if announce != "" {
		g.say("%s", announce)
	}
	if !req.KeepStdinOpen {
		return copyOutput(g, p, true)
	}
	// The stdin copier ends with the stdin it reads (its end closes the
	// command's) or once the process is over (sctx cancelled); it reports
	// nothing after that. A terminal read that never returns is waited for
	// only briefly: it holds no output and ends with the program.
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		forwardStdin(sctx, g, cl, p)
	}()
	err = copyOutput(g, p, true)
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	return err
}

// forwardStdin copies this terminal's stdin to the process, flow
// controlled (client.StdinWriter waits while the process reads slower than
// it is fed), then closes it. A refusal other than the process ending is
// printed with its code, never dropped silently.
func forwardStdin(ctx context.Context, g *globals, cl *client.Client, p *client.Process) {
	w := cl.Stdin(ctx, p.SandboxID, p.ProcessID)
	buf := make([]byte, 32<<10)
	for {
		n, err := g.stdin.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				stdinFailed(ctx, g, werr)
				return
			}
		}
		if err != nil {
			if cerr := w.Close(); cerr != nil {
				stdinFailed(ctx, g, cerr)
			}
			return
		}
	}
}

// stdinFailed reports a stdin write that failed, unless the process ended
// (its exit is reported by the output) or the command was cancelled.
func stdinFailed(ctx context.Context, g *globals, err error) {
	if ctx.Err() != nil || errors.Is(err, events.ErrProcessNotFound) || errors.Is(err, events.ErrProcessExited) || errors.Is(err, context.Canceled) {
		return
	}
	g.say("stdin not delivered: %v", err)
}

func copyOutput(g *globals, p *client.Process, killOnError bool) error {
	defer p.Close()
	for c, err := range p.Chunks() {
		if err != nil {
			return err
		}
		if c.Missing > 0 {
			g.say("%d chunk(s) of %s lost to retention before they were read", c.Missing, c.Stream)
		}
		if c.Stream == events.Stderr {
			g.stderr.Write(c.Data)
		} else {
			g.stdout.Write(c.Data)
		}
	}
	res, err := p.Wait()
	if res != nil && res.Truncated {
		g.say("output truncated at the stream cap")
	}
	if err != nil {
		return err
	}
	return exitCode(res.ExitCode)
}

func attachCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "attach SANDBOX [PROCESS]",
		Short: "Replay and follow a streamed process's output from the start (without PROCESS: the one that wrote last)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			pid := ""
			if len(args) == 2 {
				pid = args[1]
			} else {
				var err error
				if pid, err = cl.LatestProcess(cmd.Context(), args[0]); err != nil {
					return err
				}
				g.say("attaching to process %s", pid)
			}
			p, err := cl.Attach(cmd.Context(), args[0], pid)
			if err != nil {
				return err
			}
			return copyOutput(g, p, false)
		}),
	}
}

// shortCmd is a command line shortened for a log line.
func shortCmd(argv []string) string {
	shown := strings.Join(argv, " ")
	if first, _, multi := strings.Cut(shown, "\n"); multi || len(first) > 72 {
		shown = first[:min(len(first), 72)] + " …"
	}
	return shown
}
