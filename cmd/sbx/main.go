// Command sbx is sandboxio under its short name.
package main

import (
	"os"

	"github.com/sandboxio/sandboxio/cmd/sandboxio/cli"
)

func main() { os.Exit(cli.Main("sbx", os.Args[1:])) }
