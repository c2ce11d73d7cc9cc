package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/events"
)

type exposeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Port      int    `json:"port" jsonschema:"the TCP port a server in the sandbox listens on (1-65535), on 127.0.0.1 or 0.0.0.0"`
	Public    bool   `json:"public,omitempty" jsonschema:"true: anyone with the URL reaches it; false (default): a token or the signed link is needed"`
}

// exposePort publishes a port of one of the session's sandboxes and
// answers with what a person opens in a browser: a private port's signed
// link (and its token, shown once), or a public port's URL.
func (s *Server) exposePort(ctx context.Context, st *session, in exposeIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	if in.Port < events.MinPort || in.Port > events.MaxPort {
		return invalid("port", "port %d: want %d to %d", in.Port, events.MinPort, events.MaxPort), nil
	}
	access := events.PortPrivate
	if in.Public {
		access = events.PortPublic
	}
	p, err := sb.ExposePort(ctx, in.Port, access)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "port %d of sandbox %s is published (%s)\n", p.Port, sb.ID(), p.Access)
	if p.URL != "" {
		fmt.Fprintf(&b, "url: %s\n", p.URL)
	}
	if p.PathURL != "" {
		fmt.Fprintf(&b, "path_url: %s\n", p.PathURL)
	}
	if p.URL == "" && p.PathURL == "" {
		b.WriteString("url: none (this deployment's router has no gateway address configured)\n")
	}
	if p.Access == events.PortPrivate {
		// The token was shown in this reply only: a link this deployment
		// cannot make (no host routing or no link key) is said, not an error.
		link, err := s.cfg.Client.PortToken(ctx, events.PortsTokenRequest{SandboxID: sb.ID(), Port: p.Port})
		switch {
		case errors.Is(err, events.ErrPortLinkUnavailable):
			fmt.Fprintf(&b, "no browser link: %s\n", linkReason(err))
		case err != nil:
			return nil, err
		default:
			until := ""
			if link.LinkExpires != nil {
				until = " until " + link.LinkExpires.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(&b, "open in a browser: %s (valid%s; give this link to the user)\n", link.Link, until)
		}
		if p.Token != "" {
			fmt.Fprintf(&b, "token: %s (programs send it in the %s header; shown once)\n", p.Token, events.PortTokenHeader)
		} else {
			b.WriteString("token: unchanged (the port was private already)\n")
		}
	}
	b.WriteString("the server must be running in the sandbox and listening on that port")
	return textResult("%s", b.String()), nil
}

// linkReason is why there is no link: the router's message.
func linkReason(err error) string {
	var e *events.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
