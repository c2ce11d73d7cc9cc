package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// durationValue is a flag that takes seconds (90) or a Go duration (90s,
// 5m), as every duration of the CLI does.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := client.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (v durationValue) Type() string { return "duration" }

// durationVar registers a duration flag (seconds or with a unit).
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{p}, name, usage)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// createFlags are the flags of run and create.
type createFlags struct {
	class, dsn, isolation, egress string
	lifetime                      time.Duration
	env, metadata, allow          []string
	requires                      []string
	durable                       durableFlags // durable.go
	ports                         portFlags    // port.go
}

func (f *createFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.class, "class", "", "sandbox class from the routing file (default: the default class)")
	fl.StringVar(&f.dsn, "dsn", "", "docker://IMAGE, e2b://TEMPLATE or fake://")
	durationVar(fl, &f.lifetime, "lifetime", 5*time.Minute, "sandbox lifetime, after which it is removed: seconds (300) or a duration (90s, 5m, 1h)")
	fl.Var(durationValue{&f.lifetime}, "timeout", "the same as --lifetime (the process timeout is --exec-timeout)")
	fl.StringVar(&f.isolation, "require-isolation", "", "minimum isolation tier: container, gvisor, microvm")
	fl.StringVar(&f.egress, "egress", "deny", "network egress: deny or allow")
	fl.StringSliceVar(&f.allow, "allow", nil, "egress allowlist entries (hosts or CIDRs; backend must support it)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "environment variable NAME=VALUE")
	fl.StringArrayVar(&f.metadata, "metadata", nil, "metadata KEY=VALUE")
	fl.StringSliceVar(&f.requires, "requires", nil, "capabilities the backend must have (exec, files, run_code, set_timeout…)")
	f.durable.register(cmd)
	f.ports.register(cmd)
}

func (f *createFlags) request() (events.CreateRequest, error) {
	env, err := keyValues(f.env)
	if err != nil {
		return events.CreateRequest{}, err
	}
	md, err := keyValues(f.metadata)
	if err != nil {
		return events.CreateRequest{}, err
	}
	req := events.CreateRequest{Class: f.class, DSN: f.dsn, RequireIsolation: events.IsolationTier(f.isolation), Env: env, Metadata: md}
	if f.lifetime > 0 {
		req.TimeoutS = int((f.lifetime + time.Second - 1) / time.Second)
	}
	if f.egress != "deny" || len(f.allow) > 0 {
		req.Network = &events.NetworkPolicy{Egress: f.egress, Allow: f.allow}
	}
	for _, c := range f.requires {
		req.Requires = append(req.Requires, events.Capability(c))
	}
	f.durable.apply(&req)
	if err := f.ports.apply(&req); err != nil {
		return events.CreateRequest{}, err
	}
	return req, nil
}

func keyValues(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}

// outputFormat is -q and --format of the commands that print records.
type outputFormat struct {
	quiet   bool
	format  string
	example string // a template that works for this command's items
}

// register adds -q and --format; example is a Go template for the
// command's items, shown in the help (TestHelpFormatExamples runs it).
func (f *outputFormat) register(cmd *cobra.Command, def, quietHelp, example string) {
	f.example = example
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, quietHelp)
	cmd.Flags().StringVar(&f.format, "format", def, "output: table, json, or a Go template for each item, e.g. '"+example+"' ('{{json .}}' for one JSON line)")
}

// view is what a command prints: the whole reply (json), its items (one
// template execution each), their ids (-q) and a table.
type view struct {
	whole any
	items []any
	ids   []string
	table func(w io.Writer)
}

func (f *outputFormat) print(w io.Writer, v view) error {
	switch {
	case f.quiet:
		for _, id := range v.ids {
			fmt.Fprintln(w, id)
		}
		return nil
	case f.format == "json":
		return printJSON(w, v.whole)
	case f.format == "table" || f.format == "":
		if v.table == nil {
			return printJSON(w, v.whole)
		}
		v.table(w)
		return nil
	case strings.Contains(f.format, "{{"):
		tmpl, err := template.New("format").Funcs(template.FuncMap{"json": func(x any) (string, error) {
			b, err := json.Marshal(x)
			return string(b), err
		}}).Parse(f.format)
		if err != nil {
			return usageErr(fmt.Errorf("--format: %w", err))
		}
		for _, it := range v.items {
			if err := tmpl.Execute(w, it); err != nil {
				return usageErr(fmt.Errorf("--format: %w", err))
			}
			fmt.Fprintln(w)
		}
		return nil
	}
	return usageErr(fmt.Errorf("--format %q: want table, json or a Go template such as '%s'", f.format, f.example))
}

// stripDashes removes the "--" that separates a command from its
// arguments where flag parsing stopped before it (flags end at the first
// positional, as in docker).
func stripDashes(args []string) []string {
	if len(args) > 0 && args[0] == "--" {
		return args[1:]
	}
	return args
}

// outputMaxBytes reads SBX_OUT's byte limit ("": the bus's default).
func outputMaxBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return parseSize(s)
}

// busLimitEnv is the environment variable of one of the bus's byte limits.
func busLimitEnv(name string) string {
	if name == "output" {
		return "SBX_OUTPUT_MAX_BYTES"
	}
	return "SBX_BUS_" + strings.ToUpper(name) + "_MAX_BYTES"
}

// busLimitFlags are the bus's byte limits as flags, --<name>-max-bytes,
// each defaulting to its environment variable (busLimitEnv).
type busLimitFlags map[string]*string

// register adds a flag per limit of the bus to fs.
func (b busLimitFlags) register(fs *pflag.FlagSet) {
	var c bus.Config
	for _, l := range c.Limits() {
		v := new(string)
		b[l.Name] = v
		env := busLimitEnv(l.Name)
		fs.StringVar(v, l.Name+"-max-bytes", os.Getenv(env), fmt.Sprintf("%s's byte limit, e.g. 512MiB (default %s, scaled down to fit a smaller JetStream store; env %s); applied by the bus's owner",
			l.Bounds, sizeText(l.Default), env))
	}
}

// apply sets c's limits from the flags; a bad size is a usage error.
func (b busLimitFlags) apply(c *bus.Config) error {
	for _, l := range c.Limits() {
		v, ok := b[l.Name]
		if !ok {
			continue
		}
		n, err := outputMaxBytes(*v)
		if err != nil {
			return usageErr(fmt.Errorf("--%s-max-bytes: %w", l.Name, err))
		}
		*l.Bytes = n
	}
	return nil
}

// busLimitsFromEnv sets c's limits from their environment variables (dev).
func busLimitsFromEnv(c *bus.Config) error {
	for _, l := range c.Limits() {
		n, err := outputMaxBytes(os.Getenv(busLimitEnv(l.Name)))
		if err != nil {
			return fmt.Errorf("%s: %w", busLimitEnv(l.Name), err)
		}
		*l.Bytes = n
	}
	return nil
}

// sizeText writes n in the largest binary unit that divides it.
func sizeText(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprint(n)
}
