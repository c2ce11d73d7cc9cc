package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// maxCodeBytes bounds the code run-code reads from a file or stdin.
const maxCodeBytes = 4 << 20

func runCodeCmd(g *globals) *cobra.Command {
	var language, context, images string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run-code [flags] SANDBOX [FILE|-]",
		Short: "Run code in a sandbox's interpreter (python by default) from FILE or stdin",
		Long: `run-code runs code (FILE, or stdin when FILE is - or absent) in SANDBOX's interpreter.
Its output goes to stdout and stderr, text results to stdout, an exception and its
traceback to stderr; an image or HTML result is saved as a file (result-N.png, .jpeg,
.svg, .html in --images) whose path is printed on stderr. It exits with the interpreter's code (1 when the code raised),
124 when it ran past --timeout. --context names a context whose state (variables,
imports) later runs share, where the backend keeps state.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := "-"
			if len(args) == 2 {
				src = args[1]
			}
			code, err := g.readCode(src)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			defer cl.Close()
			r, err := cl.Sandbox(args[0]).RunCode(cmd.Context(), client.Code{Language: language, Code: string(code), Context: context, Timeout: timeout})
			if err != nil {
				return err
			}
			g.stdout.Write(r.Stdout)
			g.stderr.Write(r.Stderr)
			if err := g.showResults(r.Results, images); err != nil {
				return err
			}
			if r.Error != nil {
				fmt.Fprintf(g.stderr, "%s: %s\n%s\n", r.Error.Name, r.Error.Value, r.Error.Traceback)
				if r.ExitCode == 0 {
					return exitError{code: 1}
				}
			}
			return exitCode(r.ExitCode)
		},
	}
	cmd.Flags().StringVarP(&language, "language", "l", "", "interpreter language (default python)")
	cmd.Flags().StringVar(&context, "context", "", "a context name: runs with the same one share state")
	cmd.Flags().StringVar(&images, "images", "", "directory for image and HTML results (default: a new directory under $TMPDIR); each file's path is printed on stderr")
	durationVar(cmd.Flags(), &timeout, "timeout", 0, "kill the run after this long: seconds (30) or a duration (2m); 0 is the server's default")
	return cmd
}

// readCode reads run-code's source, bounded.
func (g *globals) readCode(src string) ([]byte, error) {
	var r io.Reader
	if src == "-" {
		if g.stdin == nil {
			return nil, usageErr(fmt.Errorf("run-code: no FILE and no stdin"))
		}
		r = g.stdin
	} else {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	code, err := io.ReadAll(io.LimitReader(r, maxCodeBytes+1))
	if err != nil {
		return nil, err
	}
	if len(code) > maxCodeBytes {
		return nil, usageErr(fmt.Errorf("run-code: the code is larger than %d bytes", maxCodeBytes))
	}
	return code, nil
}

// showResults prints text results and saves the others (images, HTML) as
// files in dir (a new temporary directory when dir is ""), saying where.
func (g *globals) showResults(results []events.RichResult, dir string) error {
	for i, res := range results {
		if res.Text != "" {
			fmt.Fprintln(g.stdout, res.Text)
		}
		var data []byte
		var ext string
		switch {
		case res.PNG != "" || res.JPEG != "":
			ext, data = "png", []byte(res.PNG)
			if res.PNG == "" {
				ext, data = "jpeg", []byte(res.JPEG)
			}
			dec, err := base64.StdEncoding.DecodeString(string(data))
			if err != nil {
				return fmt.Errorf("run-code: the %s result is not base64: %w", ext, err)
			}
			data = dec
		case res.SVG != "":
			ext, data = "svg", []byte(res.SVG)
		case res.HTML != "":
			ext, data = "html", []byte(res.HTML)
		default:
			continue
		}
		if dir == "" {
			d, err := os.MkdirTemp("", "sandboxio-run-code-")
			if err != nil {
				return err
			}
			dir = d
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		path := filepath.Join(dir, fmt.Sprintf("result-%d.%s", i+1, ext))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		g.say("%s result saved to %s", ext, path)
	}
	return nil
}
