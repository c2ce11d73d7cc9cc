package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/gateway"
)

// newPortDialer opens the gateway's connections to sandboxes' ports on
// nc; close ends it.
func newPortDialer(_ *nats.Conn, _ []byte, _ *slog.Logger) (gateway.PortDialer, func(), error) {
	return noTunnel{}, func() {}, nil
}

// noTunnel answers every dial with CapabilityNotSupported: this build
// carries no connection to a sandbox's port.
type noTunnel struct{}

func (noTunnel) Dial(_ context.Context, sb events.Sandbox, port int) (net.Conn, error) {
	return nil, fmt.Errorf("gateway: no tunnel to %s:%d in this build: %w", sb.SandboxID, port, events.ErrCapabilityNotSupported)
}
