package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestClientConnsBounded: the gateway holds at most MaxClientConns client
// connections at once; another waits until one closes, then is served.
func TestClientConnsBounded(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxClientConns = 2 })
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	addr := e.g.Addr().String()
	request := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", hostOf("sba", 8000)); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := request(c); err != nil { // served, then kept alive
			t.Fatal(err)
		}
		held = append(held, c)
	}
	third, err := net.Dial("tcp", addr) // accepted by the kernel, not yet by the gateway
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	served := make(chan error, 1)
	go func() { served <- request(third) }()
	select {
	case err := <-served:
		t.Fatalf("a third connection was served past MaxClientConns 2 (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("the waiting connection once one closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not served within 10 s of a close")
	}
}
