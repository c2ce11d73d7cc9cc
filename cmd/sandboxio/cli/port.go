package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// portCmd is `port expose|ls|rm|token`: a sandbox's ports published through
// the gateway.
func portCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "port",
		Short: "Publish a sandbox's TCP ports through the gateway (expose, ls, rm, token)",
		Long: `port publishes a TCP port of a sandbox through the ports gateway, even when the
sandbox's egress is denied: the gateway reaches it through the sandbox's worker.

A private port (the default) needs its token: in the X-Sbx-Port-Token header, or a
signed link that a browser opens once to get a cookie for that port. expose prints
such a link for a private port; port token mints another, or rotates the token.
A public port (--public) needs nothing: anyone with its URL reaches it.`,
	}
	cmd.AddCommand(portExposeCmd(g), portLsCmd(g), portRmCmd(g), portTokenCmd(g))
	return cmd
}

// portArg reads a PORT argument.
func portArg(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < events.MinPort || p > events.MaxPort {
		return 0, usageErr(fmt.Errorf("%q is not a port (%d..%d)", s, events.MinPort, events.MaxPort))
	}
	return p, nil
}

// openURL is the address to open in a browser: the signed link of a
// private port, else its host-routed URL, else its path-routed one.
func openURL(p events.PortInfo) string {
	switch {
	case p.Link != "":
		return p.Link
	case p.URL != "":
		return p.URL
	}
	return p.PathURL
}

func portExposeCmd(g *globals) *cobra.Command {
	var public bool
	var ttl time.Duration
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "expose SANDBOX PORT",
		Short: "Publish PORT of a sandbox and print its URL (and a private port's token, shown once)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			access := events.PortPrivate
			if public {
				access = events.PortPublic
			}
			p, err := cl.ExposePort(cmd.Context(), args[0], port, access)
			if err != nil {
				return err
			}
			if p.Access == events.PortPrivate {
				// The token is in this reply only: a link this deployment
				// cannot make is said on stderr, not an error.
				link, err := cl.PortToken(cmd.Context(), events.PortsTokenRequest{SandboxID: args[0], Port: port, LinkTTLS: linkSeconds(ttl)})
				switch {
				case errors.Is(err, events.ErrPortLinkUnavailable):
					g.say("no browser link: %v", err)
				case err != nil:
					return err
				default:
					p.Link, p.LinkExpires = link.Link, link.LinkExpires
				}
			}
			return out.print(g.stdout, view{whole: p, items: []any{p}, ids: []string{openURL(*p)},
				table: func(w io.Writer) { portDetail(w, *p) }})
		}),
	}
	cmd.Flags().BoolVar(&public, "public", false, "anyone with the URL reaches the port (default: private, the token or a signed link is needed)")
	durationVar(cmd.Flags(), &ttl, "link-ttl", events.DefaultPortLinkTTL, "how long a private port's printed link lets a browser in (at most 24h)")
	out.register(cmd, "table", "print only the URL to open (a private port's signed link)", "{{.URL}} {{.Token}}")
	return cmd
}

// linkSeconds is d in whole seconds, rounded up (0 stays 0).
func linkSeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// portDetail prints one port, field by field, with the token's and the
// link's caveats.
func portDetail(w io.Writer, p events.PortInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "port\t%d (%s)\n", p.Port, p.Access)
	if p.URL != "" {
		fmt.Fprintf(tw, "url\t%s\n", p.URL)
	}
	if p.PathURL != "" {
		fmt.Fprintf(tw, "path_url\t%s\n", p.PathURL)
	}
	if p.URL == "" && p.PathURL == "" {
		fmt.Fprintf(tw, "url\t(no gateway address configured: the router has no --gateway-url)\n")
	}
	if p.Token != "" {
		fmt.Fprintf(tw, "token\t%s (shown once; send it as X-Sbx-Port-Token)\n", p.Token)
	}
	if p.Link != "" {
		until := ""
		if p.LinkExpires != nil {
			until = " until " + p.LinkExpires.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "link\t%s (opens in a browser%s)\n", p.Link, until)
	}
	tw.Flush()
}

func portLsCmd(g *globals) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "ls SANDBOX",
		Short: "List a sandbox's published ports",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			ports, err := cl.ListPorts(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			v := view{whole: ports, table: func(w io.Writer) { portsTable(w, ports) }}
			for _, p := range ports {
				v.items, v.ids = append(v.items, p), append(v.ids, strconv.Itoa(p.Port))
			}
			return out.print(g.stdout, v)
		}),
	}
	out.register(cmd, "table", "print only the ports", "{{.Port}} {{.Access}} {{.URL}}")
	return cmd
}

func portsTable(w io.Writer, ports []events.PortInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tACCESS\tURL\tEXPOSED")
	for _, p := range ports {
		u := p.URL
		if u == "" {
			u = dash(p.PathURL)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", p.Port, p.Access, u, when(p.ExposedAt))
	}
	tw.Flush()
}

func portRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SANDBOX PORT",
		Short: "Stop publishing PORT of a sandbox (succeeds when it was not published)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			r, err := cl.UnexposePort(cmd.Context(), args[0], port)
			if err != nil {
				return err
			}
			if !r.WasExposed {
				g.say("port %d of sandbox %s was not published", port, args[0])
			}
			return nil
		}),
	}
}

func portTokenCmd(g *globals) *cobra.Command {
	var rotate bool
	var ttl time.Duration
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "token SANDBOX PORT",
		Short: "Print a signed link to a private port; --rotate replaces its token first (voiding old links and cookies)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			if ttl < 0 || ttl > events.MaxPortLinkTTL {
				return usageErr(fmt.Errorf("--link-ttl %v is out of range 0..%v", ttl, events.MaxPortLinkTTL))
			}
			p, err := cl.PortToken(cmd.Context(), events.PortsTokenRequest{SandboxID: args[0], Port: port, Rotate: rotate, LinkTTLS: linkSeconds(ttl)})
			if err != nil {
				return err
			}
			return out.print(g.stdout, view{whole: p, items: []any{p}, ids: []string{p.Link},
				table: func(w io.Writer) { portDetail(w, *p) }})
		}),
	}
	cmd.Flags().BoolVar(&rotate, "rotate", false, "replace the port's token (printed once); links and cookies made with the old one stop working")
	durationVar(cmd.Flags(), &ttl, "link-ttl", events.DefaultPortLinkTTL, "how long the link lets a browser in (at most 24h)")
	out.register(cmd, "table", "print only the link", "{{.Link}}")
	return cmd
}

// portFlags are create's and run's --port flags: ports published once the
// sandbox runs (events.CreateRequest.Ports).
type portFlags struct{ specs []string }

func (f *portFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.specs, "port", nil,
		"publish this port of the sandbox through the gateway once it runs: PORT (private) or PORT:public; its URL is printed on stderr")
}

// apply adds the ports to r.
func (f *portFlags) apply(r *events.CreateRequest) error {
	for _, s := range f.specs {
		p, access, colon := strings.Cut(s, ":")
		port, err := portArg(p)
		if err != nil {
			return fmt.Errorf("--port %q: want PORT or PORT:public", s)
		}
		switch {
		case !colon, access == string(events.PortPrivate), access == string(events.PortPublic):
		default:
			return fmt.Errorf("--port %q: want PORT or PORT:public", s)
		}
		r.Ports = append(r.Ports, events.PortSpec{Port: port, Access: events.PortAccess(access)})
	}
	return nil
}

// sayPorts tells the user, on stderr, where the ports a create published
// are: a private port's signed link (to open in a browser) and its token,
// shown once; a public port's URL.
func (g *globals) sayPorts(ctx context.Context, cl *client.Client, sb *client.Sandbox) {
	for _, p := range sb.Ports {
		if p.Access == events.PortPublic {
			g.say("port %d (public): %s", p.Port, openURL(p))
			continue
		}
		link, err := cl.PortToken(ctx, events.PortsTokenRequest{SandboxID: sb.SandboxID, Port: p.Port})
		if err != nil {
			g.say("port %d (private): %s (no link: %v)", p.Port, openURL(p), err)
		} else {
			g.say("port %d (private): open %s in a browser", p.Port, link.Link)
		}
		if p.Token != "" {
			g.say("port %d token (shown once; send it as %s): %s", p.Port, portauth.TokenHeader, p.Token)
		}
	}
}
