package worker

import (
	"context"
	"net"
)

// PortDialer is a Backend that carries a TCP connection to a port inside a
// sandbox (events.CapPorts), whatever the sandbox's network policy: the
// Docker backend dials through the sandbox's agent, from inside its network
// namespace. The runtime's port server (ports.go, internal/tunnel) calls it
// only for a sandbox this worker owns and a port its registry record
// publishes.
//
// Errors: events.ErrPortUnreachable when nothing in the sandbox accepts
// connections on the port (nothing was sent to it), events.ErrSandboxGone,
// events.ErrCapabilityNotSupported for a sandbox that cannot (one without
// the agent). The connection, when it supports it, half-closes with
// CloseWrite() error.
type PortDialer interface {
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
}
