package cli

import (
	"time"

	"github.com/spf13/cobra"

	mcpserver "github.com/sandboxio/sandboxio/services/mcp"
)

func mcpCmd(g *globals) *cobra.Command {
	var cfg mcpserver.Config
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to AI agents over the Model Context Protocol (stdio, or streamable HTTP with --http)",
		Long: `mcp is a Model Context Protocol server: an MCP host (an IDE, a desktop assistant, an
agent framework) gets sandboxes as tools — create_sandbox, run_command, command_status,
run_code, write_file, read_file, list_files, set_timeout, list_sandboxes, kill_sandbox.
It serves stdio by default (the host starts it), or streamable HTTP at
http://ADDR/mcp with --http ADDR. It reaches the deployment as any client does
(--nats, --creds… or the SBX_NATS_* variables). Sandboxes created in a session are
killed when the session ends; their lifetime is the backstop. Logs go to stderr.
Configuration for common hosts: docs/agents.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			cfg.Client, cfg.Logger = cl, g.logger()
			srv, err := mcpserver.New(cfg)
			if err != nil {
				return err
			}
			return srv.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.HTTPAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio")
	f.StringVar(&cfg.Class, "class", "", "class of sandboxes created without one (default: the deployment's default class)")
	durationVar(f, &cfg.Lifetime, "lifetime", 30*time.Minute, "lifetime of sandboxes created without one")
	durationVar(f, &cfg.MaxLifetime, "max-lifetime", 24*time.Hour, "the longest lifetime a tool call may ask")
	durationVar(f, &cfg.ExecTimeout, "exec-timeout", 2*time.Minute, "timeout of commands and code run without one")
	durationVar(f, &cfg.KillGrace, "kill-grace", 10*time.Second, "how long the kills at a session's end may take")
	durationVar(f, &cfg.SessionIdle, "session-idle", 30*time.Minute, "close an HTTP session idle this long (and kill its sandboxes)")
	f.IntVar(&cfg.MaxOutputBytes, "max-output", 16<<10, "bytes of each of stdout and stderr a result shows (head and tail)")
	f.IntVar(&cfg.MaxFileBytes, "max-file", 8<<20, "largest file read_file and write_file move")
	return cmd
}
