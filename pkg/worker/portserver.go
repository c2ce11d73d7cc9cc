package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/internal/tunnel"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The port server: a backend that is a PortDialer gets a tunnel server
// (internal/tunnel) on events.TunnelOpenSubject(backend, worker). It obeys
// an open only when its signature is a trusted commander's whose scope
// allows events.OpPortsOpen (no check in open deployments, as for
// commands), and only for a port that the sandbox's registry record
// publishes, of a running sandbox this worker owns; the open's own claims
// are never trusted for that.

// startPorts starts the port server when the backend can dial ports.
func (w *Worker) startPorts(ctx context.Context) error {
	pd, ok := w.backend.(PortDialer)
	if !ok {
		return nil
	}
	srv, err := tunnel.NewServer(w.nc, tunnel.ServerConfig{
		Backend: w.info.Name, Worker: w.cfg.WorkerID, Log: w.log,
		Open:   func(ctx context.Context, o events.TunnelOpen) (net.Conn, error) { return w.openPort(ctx, pd, o) },
		Verify: w.checkOpenSigner,
	})
	if err != nil {
		return err
	}
	w.goTracked(func() {
		if err := srv.Run(ctx); err != nil {
			w.log.Error("port server failed", "err", err)
		}
	})
	return nil
}

// checkOpenSigner verifies an open's signature as checkSigner does a
// command's, with the scope events.OpPortsOpen.
func (w *Worker) checkOpenSigner(subject string, h nats.Header, data []byte) error {
	if len(w.cfg.TrustedCommandSigners) == 0 {
		return nil
	}
	signer, err := recsign.Verify(subject, h, data)
	switch {
	case errors.Is(err, recsign.ErrUnsigned):
		return events.Errorf(events.CodeUnauthorized, "the open is not signed by a trusted commander")
	case err != nil:
		return events.Errorf(events.CodeUnauthorized, "the open's signature does not verify")
	case !slices.Contains(w.cfg.TrustedCommandSigners, signer):
		return events.Errorf(events.CodeUnauthorized, "the open is signed by %s, not a trusted commander", signer)
	}
	if scope, ok := w.cfg.CommandScopes[signer]; ok && !slices.Contains(scope, events.OpPortsOpen) {
		return events.Errorf(events.CodeForbidden, "the open's signer %s may not open ports", signer).With("signer", signer)
	}
	return nil
}

// openPort checks an open against the registry and dials the port. An
// unknown sandbox, another worker's, another tenant's and a port not
// published all answer the same PortNotExposed.
func (w *Worker) openPort(ctx context.Context, pd PortDialer, o events.TunnelOpen) (net.Conn, error) {
	notExposed := events.Errorf(events.CodePortNotExposed, "port %d of sandbox %s is not published", o.Port, o.SandboxID).
		With("port", o.Port)
	if !events.ValidID(o.SandboxID) || w.lookup(o.SandboxID) == nil {
		return nil, notExposed
	}
	entry, err := w.registry.Get(ctx, o.SandboxID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, notExposed
	}
	if err != nil {
		return nil, events.Errorf(events.CodeBackendUnavailable, "read the registry: %v", err)
	}
	var rec events.Sandbox
	if err := json.Unmarshal(entry.Value(), &rec); err != nil || rec.SandboxID != o.SandboxID ||
		rec.Worker != w.cfg.WorkerID || rec.Backend != w.info.Name || rec.Tenant != o.Tenant {
		return nil, notExposed
	}
	if !slices.ContainsFunc(rec.Ports, func(p events.PortExposure) bool { return p.Port == o.Port }) {
		return nil, notExposed
	}
	if slices.Contains(w.cfg.ReservedPorts, o.Port) {
		return nil, events.Errorf(events.CodePortReserved, "port %d is reserved by the operator", o.Port).
			With("reserved", w.cfg.ReservedPorts)
	}
	switch rec.State {
	case events.StateRunning:
	case events.StatePaused:
		return nil, events.Errorf(events.CodeSandboxPaused, "sandbox %s is paused", o.SandboxID)
	default:
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is not running (%s)", o.SandboxID, rec.State)
	}
	c, err := pd.DialPort(ctx, o.SandboxID, o.Port)
	if err != nil {
		return nil, classify(err)
	}
	return &portConn{Conn: c, w: w, id: o.SandboxID}, nil
}

// portConn is a port's connection whose failure, once its sandbox has
// gone (killed, died), says so (SBX_E1204) instead of the backend's own
// error.
type portConn struct {
	net.Conn
	w  *Worker
	id string
}

func (c *portConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	return n, c.classify(err)
}

func (c *portConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	return n, c.classify(err)
}

// CloseWrite half-closes the connection when the backend's can.
func (c *portConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *portConn) classify(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	sb := c.w.lookup(c.id)
	gone := sb == nil
	if sb != nil {
		sb.mu.Lock()
		gone = sb.gone || sb.killWait != nil
		sb.mu.Unlock()
	}
	if gone {
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeSandboxGone, "sandbox %s has ended", c.id), err)
	}
	return err
}
