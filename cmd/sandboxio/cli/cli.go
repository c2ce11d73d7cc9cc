package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/internal/timerslack"
)

type globals struct {
	natsURL  string
	conn     natsconn.Options // credential and TLS flags
	conns    connState
	logLevel string
	logJSON  bool
	stdout   io.Writer
	stderr   io.Writer
	// stdin is what -i forwards (nil: none); stdinPiped says it is a pipe
	// or a file rather than a terminal, for the warning when -i is missing.
	stdin      io.Reader
	stdinPiped bool
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logJSON {
		return slog.New(slog.NewJSONHandler(g.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(g.stderr, opts))
}

// Main runs the CLI and returns the process exit code.
func Main(name string, args []string) int {
	ctx, stop := signalContext(func() {
		fmt.Fprintln(os.Stderr, name+": second signal: exiting now")
		os.Exit(130)
	})
	defer stop()
	relaxTimers = true
	return runWithStdin(ctx, name, args, os.Stdin, os.Stdout, os.Stderr)
}

// relaxTimers: this process is the program itself (Main), not a test that
// runs the CLI in-process, so a server role may execute it again
// (timerslack.Relax).
var relaxTimers bool

// serverRoles are the commands that run for long and serve: their threads
// run with timerslack.Relaxed (ADR 28).
var serverRoles = map[string]bool{"dev": true, "demo": true, "router": true, "fake-worker": true, "docker-worker": true,
	"e2b-worker": true, "modal-worker": true, "auditor": true, "reaper": true, "nats-server": true, "gateway": true}

// run runs the CLI with no stdin.
func run(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	return runWithStdin(ctx, name, args, nil, stdout, stderr)
}

// runWithStdin runs the CLI; stdin is what -i forwards and `cp -` reads.
func runWithStdin(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, stdin: stdin, stdinPiped: piped(stdin)}
	root := &cobra.Command{
		Use:           name,
		Short:         "sandboxio runs untrusted code in isolated sandboxes behind one NATS API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.natsURL, "nats", "", "NATS server URL (default $SBX_NATS_URL, else nats://127.0.0.1:4222)")
	g.conn.AddFlags(pf)
	pf.StringVar(&g.logLevel, "log-level", envOr("SBX_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	pf.BoolVar(&g.logJSON, "log-json", os.Getenv("SBX_LOG_JSON") == "1", "log as JSON")

	root.AddCommand(devCmd(g), demoCmd(g))
	root.AddCommand(roleCmds(g)...)
	root.AddCommand(clientCmds(g)...)
	root.AddCommand(opsCmds(g)...)
	root.AddCommand(natsServerCmd(g))
	root.AddCommand(authCmds(g)...)
	root.AddCommand(benchCmd(g))
	root.AddCommand(gatewayCmd(g))
	root.AddCommand(versionCmd(g))

	usageArgs(root)
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		if serverRoles[cmd.Name()] && cmd.Parent() == root {
			// OpenTelemetry's own errors (an OTLP export that fails) go
			// to the role's log, not to the standard library's log. The
			// handler is global: only the serving roles, which export
			// spans, set it.
			log := g.logger()
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
				log.Error("opentelemetry: export or SDK error", "err", err)
			}))
		}
		if relaxTimers && serverRoles[cmd.Name()] && cmd.Parent() == root && os.Getenv("SBX_RELAX_TIMERS") != "0" {
			timerslack.Relax() // may execute the program again, from the start
		}
	}
	err := root.ExecuteContext(ctx)
	g.conns.closeAll()
	if err == nil {
		return 0
	}
	return exitFor(name, stderr, err)
}

// usageArgs makes every command's argument-count errors usage errors.
func usageArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageErr(err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// piped reports whether r is a pipe or a file (not a terminal, not
// /dev/null): input the user may have meant for the command.
func piped(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return r != nil
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&(os.ModeNamedPipe) != 0 || st.Mode().IsRegular()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
