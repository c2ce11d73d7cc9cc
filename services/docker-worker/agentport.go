package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

var _ worker.PortDialer = (*Backend)(nil)

// DialPort connects to port on the sandbox's loopback through its agent
// (internal/agent/server, OpDial): from inside the sandbox's network
// namespace, so it works whatever the egress policy, deny included, on runc
// (socket channel) and gVisor (attach stream) alike. A sandbox without a
// live agent cannot: CapabilityNotSupported.
func (b *Backend) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if port < events.MinPort || port > events.MaxPort {
		return nil, events.Errorf(events.CodeInvalidValue, "port %d is out of range %d..%d", port, events.MinPort, events.MaxPort).With("field", "port")
	}
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	if sb.gone.Load() {
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s stopped", sandboxID)
	}
	cl := sb.agentOf()
	if cl == nil {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "sandbox %s runs without its agent: its ports cannot be reached", sandboxID).
			With("capability", string(events.CapPorts))
	}
	c, err := cl.Dial(ctx, port)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, agent.ErrRefused):
		return nil, events.Errorf(events.CodePortUnreachable, "nothing in sandbox %s accepts connections on port %d", sandboxID, port).
			With("port", port)
	case errors.Is(err, agent.ErrNoDial):
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "sandbox %s runs an agent that predates ports", sandboxID).
			With("capability", string(events.CapPorts))
	case errors.Is(err, agent.ErrUnreachable):
		return nil, events.Errorf(events.CodePortUnreachable, "sandbox %s: %v", sandboxID, err).
			With("port", port)
	case errors.Is(err, agent.ErrDialBusy):
		return nil, events.Errorf(events.CodeOverloaded, "sandbox %s: %v", sandboxID, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return nil, fmt.Errorf("dockerworker: dial port %d: %w", port, b.agentFailed(ctx, sb, err))
}
