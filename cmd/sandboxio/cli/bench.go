package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/bench"
	"github.com/sandboxio/sandboxio/internal/natsconn"
)

// benchCmd is `sandboxio bench SCENARIO`: internal/bench against the
// server of --nats, with the invocation's credentials.
func benchCmd(g *globals) *cobra.Command {
	var (
		cfg                 bench.Config
		classes, live, size string
		rss                 string
		jsonOut, yes, quiet bool
		timeout             time.Duration
		wsCount, wsRounds   int
		portURL             portTarget
	)
	cmd := &cobra.Command{
		Use:   "bench SCENARIO [-- CMD...]",
		Short: "Measure a deployment from outside: exec, create, stream or live, beside the server's own floor",
		Long: `bench measures the deployment --nats reaches as a client sees it, and the floor of the
same server in the same run: a micro PING round trip to the router and a bare
request/reply to a responder bench starts on its own connection. Absolute figures
on a busy machine are noisy; the ratios to the floor are what to compare.

  exec    sequential non-streamed exec latency (interleaved with the floor), then
          throughput of -c clients over --conns connections
  create  create -> first exec done -> kill, one at a time, per --classes
  resume  the create scenario, then one sandbox of each class holding 100 MiB of random
          bytes paused and resumed: pause, and resume to first exec beside the plain create
  stream  streamed output in MB/s (--size per exec), every chunk's sequence checked
  live    fill to each --live population of live sandboxes, then measure exec,
          list, create and kill at that population
  port    the ports gateway in this process beside a direct connection to the same
          server on the host: p50 of a 1 KiB page (keep-alive), one --size download
          (default 1GiB), --websockets concurrent WebSockets echoing (no NATS needed)

Every series stops at --count operations (throughput: 20x) or --duration, and the
whole run at --timeout. The sandboxes bench creates are killed when it ends. A
server that is not on a loopback address needs --yes.`,
		Args:      cobra.RangeArgs(1, 64),
		ValidArgs: append(slices.Clone(bench.Scenarios), "port"),
		RunE: func(cmd *cobra.Command, args []string) error {
			scenario := args[0]
			if scenario == "port" {
				if cfg.Count == 0 {
					cfg.Count = 2000
				}
				size, err := parseSize(size)
				if cmd.Flags().Changed("size") && err != nil {
					return fmt.Errorf("--size: %w", err)
				}
				if !cmd.Flags().Changed("size") {
					size = 1 << 30
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), min(timeout, bench.MaxDuration))
				defer cancel()
				pb := portBench{Count: cfg.Count, Size: size, WebSockets: wsCount, Rounds: wsRounds}
				if portURL.url != "" {
					if !cmd.Flags().Changed("websockets") && portURL.ws == "" {
						pb.WebSockets = 0
					}
					return runPortBenchURL(ctx, g, pb, portURL, jsonOut)
				}
				return runPortBench(ctx, g, pb, jsonOut)
			}
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				cfg.Cmd = args[dash:]
			} else if len(args) > 1 {
				return fmt.Errorf("bench takes one scenario (%s); a command goes after --", strings.Join(bench.Scenarios, ", "))
			}
			o, err := g.natsOptions("sandboxio-bench").Resolve()
			if err != nil {
				return err
			}
			if err := bench.CheckTarget(o.URL, yes); err != nil {
				return err
			}
			if cfg.Classes = splitList(classes); len(cfg.Classes) == 0 && cfg.Class != "" {
				cfg.Classes = []string{cfg.Class}
			}
			if cfg.Live, err = intList(live); err != nil {
				return fmt.Errorf("--live: %w", err)
			}
			if cfg.RSS, err = pidList(rss); err != nil {
				return fmt.Errorf("--rss-pid: %w", err)
			}
			if cfg.StreamBytes, err = parseSize(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if !quiet && !jsonOut {
				cfg.Progress = g.stderr
			}
			cfg.Dial = func(ctx context.Context, name string) (*nats.Conn, error) {
				o := g.natsOptions(name)
				return natsconn.Connect(ctx, o)
			}
			timeout = min(timeout, bench.MaxDuration)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			r, err := bench.Run(ctx, scenario, cfg)
			if r != nil {
				if jsonOut {
					_ = r.WriteJSON(g.stdout)
				} else {
					_ = r.WriteText(g.stdout)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Class, "class", "fake", "sandbox class of exec, stream and live")
	f.StringVar(&classes, "classes", "", "classes of create, comma-separated (default --class)")
	f.IntVarP(&cfg.Count, "count", "n", 0, "operations per series (default 2000; create 50, stream 5; throughput 20x)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "time bound of each series")
	f.IntVar(&cfg.Warmup, "warmup", 100, "warm-up execs before exec's series")
	f.IntVarP(&cfg.Clients, "clients", "c", 64, "concurrent callers of exec's throughput series")
	f.IntVar(&cfg.Conns, "conns", 4, "connections the clients share")
	f.StringVar(&size, "size", "64MiB", "bytes per streamed exec (suffixes KiB, MiB, GiB)")
	f.IntVar(&cfg.StreamChunk, "chunk", 64<<10, "bytes per write of the streamed exec (and per message of the floor's)")
	f.StringVar(&cfg.StreamWriter, "writer", "dd", "what writes the stream in a sandbox of a real class: dd (--chunk bytes a write) or head (head -c, its own writes)")
	f.StringVar(&live, "live", "10,100,1000", "populations of the live scenario, ascending, comma-separated")
	f.IntVar(&cfg.LiveSamples, "samples", 100, "operations of each kind at each live population")
	f.IntVar(&cfg.Parallel, "parallel", 16, "creates in flight while filling a live population")
	f.DurationVar(&cfg.Pause, "pause", 0, "think time: create's after each kill, e.g. 1s (lets a warm pool refill); exec's before each sequential exec, e.g. 50ms (an agent's loop)")
	f.IntVar(&cfg.SandboxTimeout, "sandbox-timeout", 600, "lifetime in seconds of the sandboxes bench creates")
	f.StringVar(&rss, "rss-pid", "", "local processes whose RSS is reported at each live population, and CPU µs per operation of each throughput series: PID or NAME=PID,... (e.g. dev=123, or router=12,worker=34)")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "bound of the whole run (at most 10m)")
	f.IntVar(&wsCount, "websockets", 1000, "port: concurrent WebSockets through the gateway")
	f.IntVar(&wsRounds, "ws-rounds", 10, "port: echoes per WebSocket")
	f.StringVar(&portURL.url, "url", "", "port: measure this published port's URL (a deployment's gateway, tunnel and sandbox) instead of the gateway in this process")
	f.StringVar(&portURL.token, "port-token", "", "port --url: the private port's token")
	f.StringVar(&portURL.download, "download", "", "port --url: a path under --url to download once, e.g. /big")
	f.StringVar(&portURL.ws, "ws", "", "port --url: a path under --url that echoes WebSocket messages")
	f.BoolVar(&jsonOut, "json", false, "print the report as JSON")
	f.BoolVar(&quiet, "quiet", false, "no progress line")
	f.BoolVar(&yes, "yes", false, "run against a server that is not on a loopback address")
	return cmd
}

func intList(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(strings.ReplaceAll(p, "_", ""))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseSize reads a byte count: digits with an optional KiB, MiB or GiB.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if rest, ok := strings.CutSuffix(s, suf); ok {
			s, mult = rest, m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size such as 65536 or 64MiB", s)
	}
	return n * mult, nil
}

// pidList reads "123" (named pid) or "router=12,worker=34".
func pidList(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, p := range splitList(s) {
		name, v, ok := strings.Cut(p, "=")
		if !ok {
			name, v = "pid", p
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || name == "" {
			return nil, fmt.Errorf("%q is not PID or NAME=PID", p)
		}
		out[name] = n
	}
	return out, nil
}
