package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Exit codes of the CLI itself (a command's own code is passed through).
const (
	exitSBXError = 125 // sandboxio refused or failed the request
	exitUsage    = 2
)

type globals struct {
	natsURL  string
	conn     natsconn.Options // credential and TLS flags
	conns    connState
	logLevel string
	logJSON  bool
	stdout   io.Writer
	stderr   io.Writer
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

func (g *globals) url() string {
	if g.natsURL != "" {
		return g.natsURL
	}
	if v := os.Getenv("SBX_NATS_URL"); v != "" {
		return v
	}
	return "nats://127.0.0.1:4222"
}

// Main runs the CLI and returns the process exit code.
func Main(name string, args []string) int {
	ctx, stop := signalContext(func() {
		fmt.Fprintln(os.Stderr, name+": second signal: exiting now")
		os.Exit(130)
	})
	defer stop()
	return run(ctx, name, args, os.Stdout, os.Stderr)
}

func run(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           name,
		Short:         "sandboxio runs untrusted code in isolated sandboxes behind one NATS API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
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

	err := root.ExecuteContext(ctx)
	g.conns.closeAll()
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var se *events.Error
	if errors.As(err, &se) {
		fmt.Fprintf(stderr, "%s: %s %s: %s\n", name, se.Code, se.Name, se.Message)
		return exitSBXError
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "%s: cancelled\n", name)
		return 130
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return exitUsage
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
