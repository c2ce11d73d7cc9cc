package agent

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// TestFrozenAgentIsNotHung: an agent frozen with its sandbox (a snapshot)
// answers no ping; its client waits while frozen instead of failing for
// good, and judges it again once thawed (still hung: it fails then).
func TestFrozenAgentIsNotHung(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	c, _ := fakeAgent(t, func(w net.Conn, fr *proto.Reader) {
		_, _ = fr.ReadFrame() // the exec's request, then nothing: frozen
		<-stop
	})
	thaw := c.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { _, _ = c.Exec(ctx, ExecRequest{Argv: []string{"true"}}) }()
	// Several ping timeouts pass while frozen.
	select {
	case <-c.Done():
		t.Fatalf("the client failed while its agent was frozen: %v", c.Err())
	case <-time.After(3 * time.Second):
	}
	thawed := time.Now()
	thaw()
	select {
	case <-c.Done():
		if d := time.Since(thawed); d > 5*time.Second {
			t.Errorf("a hung agent noticed %s after the thaw", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a still-hung agent was not noticed within 10 s of the thaw")
	}
}
