package router_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// Item 9: more than ~2.4 MB of stdin sent to a streamed process (as
// `sandboxio exec -i` does, 32 KiB a request) neither stalls nor is lost.
func TestLargeStdinIsDelivered(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(ctx(t))
	p, err := env.Client.Stream(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"cat"}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const total, chunk = 4 << 20, 32 << 10
	data := bytes.Repeat([]byte("0123456789abcdef"), total/16)
	got := make(chan int, 1)
	go func() {
		n := 0
		for {
			c, err := p.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("output: %v", err)
				}
				got <- n
				return
			}
			n += len(c.Data)
		}
	}()
	start := time.Now()
	for off := 0; off < total; off += chunk {
		if err := env.Client.SendStdin(ctx(t), sb.SandboxID, p.ProcessID, data[off:off+chunk], false); err != nil {
			t.Fatalf("stdin at %d bytes, after %s: %v", off, time.Since(start).Round(time.Millisecond), err)
		}
	}
	if err := env.Client.SendStdin(ctx(t), sb.SandboxID, p.ProcessID, nil, true); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != total {
			t.Fatalf("the process echoed %d bytes of %d", n, total)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not end 30s after its stdin was closed")
	}
}
