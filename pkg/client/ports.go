package client

import (
	"context"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// ExposePort publishes a TCP port of the sandbox through the gateway
// (access events.PortPrivate, the default when empty, or PortPublic). A
// private port's reply carries its token, shown only in the reply that
// minted it; exposing a port already published with the same access
// changes nothing and shows no token (PortToken with Rotate mints a new
// one). The sandbox's backend must have events.CapPorts
// (events.ErrCapabilityNotSupported); a reserved port is
// events.ErrPortReserved, one port too many events.ErrTooManyPorts.
func (c *Client) ExposePort(ctx context.Context, sandboxID string, port int, access events.PortAccess) (*events.PortInfo, error) {
	var out events.PortInfo
	if err := c.call(ctx, events.OpPortsExpose, events.PortsExposeRequest{SandboxID: sandboxID, Port: port, Access: access}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPorts lists the sandbox's published ports (without tokens).
func (c *Client) ListPorts(ctx context.Context, sandboxID string) ([]events.PortInfo, error) {
	var out events.PortsListReply
	if err := c.call(ctx, events.OpPortsList, events.PortsListRequest{SandboxID: sandboxID}, &out); err != nil {
		return nil, err
	}
	return out.Ports, nil
}

// UnexposePort stops publishing a port; unexposing a port that is not
// published succeeds (WasExposed false).
func (c *Client) UnexposePort(ctx context.Context, sandboxID string, port int) (*events.PortsUnexposeReply, error) {
	var out events.PortsUnexposeReply
	if err := c.call(ctx, events.OpPortsUnexpose, events.PortsUnexposeRequest{SandboxID: sandboxID, Port: port}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PortToken mints a signed link to a private port (Link, valid until
// LinkExpires: LinkTTLS seconds, 0 meaning events.DefaultPortLinkTTL) that
// a browser opens once to get a cookie for it; with Rotate it first
// replaces the port's token (the reply's Token), voiding the old one and
// every link and cookie made with it. A port that is not published is
// events.ErrPortNotExposed.
func (c *Client) PortToken(ctx context.Context, req events.PortsTokenRequest) (*events.PortInfo, error) {
	var out events.PortInfo
	if err := c.call(ctx, events.OpPortsToken, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExposePort publishes a port of this sandbox (Client.ExposePort).
func (s *Sandbox) ExposePort(ctx context.Context, port int, access events.PortAccess) (*events.PortInfo, error) {
	return s.c.ExposePort(ctx, s.SandboxID, port, access)
}

// ListPorts lists this sandbox's published ports (Client.ListPorts); the ports
// the create published are in the handle's Ports.
func (s *Sandbox) ListPorts(ctx context.Context) ([]events.PortInfo, error) {
	return s.c.ListPorts(ctx, s.SandboxID)
}

// UnexposePort stops publishing a port of this sandbox (Client.UnexposePort).
func (s *Sandbox) UnexposePort(ctx context.Context, port int) (*events.PortsUnexposeReply, error) {
	return s.c.UnexposePort(ctx, s.SandboxID, port)
}
