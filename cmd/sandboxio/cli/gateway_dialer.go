package cli

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/tunnel"
	"github.com/sandboxio/sandboxio/services/gateway"
)

// newPortDialer opens the gateway's connections to sandboxes' ports on
// nc: internal/tunnel, through the worker that owns each sandbox, with
// every open signed by seed (when given); close ends them all.
func newPortDialer(nc *nats.Conn, seed []byte, log *slog.Logger) (gateway.PortDialer, func(), error) {
	d, err := tunnel.NewDialer(nc, tunnel.DialerConfig{Log: log, SigningSeed: seed})
	if err != nil {
		return nil, nil, err
	}
	return d, func() { _ = d.Close() }, nil
}
