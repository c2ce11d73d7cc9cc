package tunnel

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// A port whose server accepts and then neither reads nor writes must not
// keep its connection (and the worker's slot) once the tunnel ends: the
// gateway's Close ends the port's connection too.
func TestTunnelStalledPortClosedWithTheTunnel(t *testing.T) {
	closed := make(chan struct{})
	stall := func(_ context.Context, _ events.TunnelOpen) (net.Conn, error) {
		a, b := net.Pipe() // nobody reads b: a write on a blocks
		go func() {
			buf := make([]byte, 1)
			_, _ = b.Read(buf) // one byte, then stall: the pipe's writer blocks
			<-closed
		}()
		return &closeNotify{Conn: a, closed: closed}, nil
	}
	r := newRig(t, rigOptions{open: stall})
	c, err := r.dialer.Dial(context.Background(), record(80), 80)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, func() error {
		if n := r.srv.Conns(); n != 1 {
			return fmt.Errorf("%d connections on the worker", n)
		}
		return nil
	})
	_ = c.Close()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("the port's connection is still open 3 s after the gateway closed")
	}
	waitFor(t, 3*time.Second, func() error {
		if n := r.srv.Conns(); n != 0 {
			return fmt.Errorf("%d connections on the worker", n)
		}
		return nil
	})
}

type closeNotify struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

func (c *closeNotify) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
