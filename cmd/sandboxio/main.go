// Command sandboxio is the one binary of sandboxio: the all-in-one dev mode,
// every service role, and the client commands.
package main

import (
	"os"

	"github.com/sandboxio/sandboxio/cmd/sandboxio/cli"
)

func main() { os.Exit(cli.Main("sandboxio", os.Args[1:])) }
