package cli

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
)

// clientCmds are the commands that use a deployment, one constructor each.
func clientCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{
		runCmd(g), createCmd(g), execCmd(g), attachCmd(g), runCodeCmd(g), cpCmd(g),
		lsCmd(g), getCmd(g), killCmd(g), setTimeoutCmd(g), backendsCmd(g), quotaCmd(g), mcpCmd(g),
		portCmd(g), pauseCmd(g), resumeCmd(g), snapshotCmd(g), snapshotsCmd(g),
	}
}

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

// warnStdin tells the user that piped input is not forwarded without -i.
func (g *globals) warnStdin(interactive bool) {
	if !interactive && g.stdinPiped {
		g.say("warning: stdin is piped but not forwarded to the command; use -i to send it")
	}
}

// say writes one line for the user on stderr.
func (g *globals) say(format string, args ...any) {
	fmt.Fprintf(g.stderr, "sandboxio: "+format+"\n", args...)
}
