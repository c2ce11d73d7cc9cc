package fake

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

var _ worker.PortDialer = (*Backend)(nil)

// DialPort implements worker.PortDialer: Config.Serve's function serves
// the connection, over a unix socket pair (kernel-buffered, both ends
// half-close), on a goroutine that ends with the connection. A kill
// closes the sandbox's connections.
func (b *Backend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	b.record(Call{Method: "DialPort", SandboxID: id})
	if port < events.MinPort || port > events.MaxPort {
		return nil, events.Errorf(events.CodeInvalidValue, "port %d is out of range", port).With("field", "port")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bx, err := b.get(id)
	if err != nil {
		return nil, err
	}
	var serve func(net.Conn)
	if b.cfg.Serve != nil {
		serve = b.cfg.Serve(id, port)
	}
	if serve == nil {
		return nil, events.Errorf(events.CodePortUnreachable, "fake: nothing in sandbox %s listens on port %d", id, port).With("port", port)
	}
	client, server, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("fake: %w", err)
	}
	b.mu.Lock()
	if b.sandboxes[id] != bx {
		b.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return nil, events.Errorf(events.CodeSandboxGone, "fake: no sandbox %s", id)
	}
	if bx.conns == nil {
		bx.conns = make(map[net.Conn]struct{})
	}
	bx.conns[client], bx.conns[server] = struct{}{}, struct{}{}
	b.mu.Unlock()
	go func() {
		defer func() {
			_ = server.Close()
			b.mu.Lock()
			delete(bx.conns, client)
			delete(bx.conns, server)
			b.mu.Unlock()
		}()
		serve(server)
	}()
	return client, nil
}

// socketPair is a connected pair of unix stream sockets.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), "fake-port")
		defer f.Close()
		return net.FileConn(f)
	}
	a, err := conn(fds[0])
	if err != nil {
		_ = syscall.Close(fds[1])
		return nil, nil, err
	}
	c, err := conn(fds[1])
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	return a, c, nil
}
