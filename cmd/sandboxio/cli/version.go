package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

// versionCmd prints what this binary is: its module version, the VCS
// revision it was built from, the Go version, and whether the docker
// worker's sbx-agent is beside it (ADR 33).
func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show the module version, VCS revision, Go version and whether sbx-agent is beside this binary",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			printVersion(g.stdout)
			return nil
		},
	}
}

func printVersion(w io.Writer) {
	mod, rev := "(unknown)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		mod = bi.Main.Path + " " + bi.Main.Version
		rev = buildSetting(bi, "vcs.revision", "(not recorded)")
		if t := buildSetting(bi, "vcs.time", ""); t != "" {
			rev += " " + t
		}
		if buildSetting(bi, "vcs.modified", "") == "true" {
			rev += " (modified)"
		}
	}
	fmt.Fprintf(w, "module    %s\n", mod)
	fmt.Fprintf(w, "revision  %s\n", rev)
	fmt.Fprintf(w, "go        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if p, ok := dockerworker.AgentFound(); ok {
		fmt.Fprintf(w, "sbx-agent %s\n", p)
	} else {
		fmt.Fprintf(w, "sbx-agent not found (%s): the docker worker builds it only with a Go toolchain inside a sandboxio checkout, "+
			"else refuses to start; build it there with CGO_ENABLED=0 go build -o %s ./cmd/sbx-agent, or `make build`\n", p, p)
	}
}

func buildSetting(bi *debug.BuildInfo, key, def string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return def
}
