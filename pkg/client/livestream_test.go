package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestOpenStreamFollowsTheLiveCopy: on an open deployment a streamed exec
// is read from the live copy (ADR 23), not through a consumer of its own on
// SBX_OUT: while the process still runs, SBX_OUT has no consumer once the
// first replay is over. (It kept an ordered consumer for the whole stream
// before.) Its output is complete and in order all the same.
func TestOpenStreamFollowsTheLiveCopy(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	if env.Auth != nil {
		t.Skip("tenants followed the live copy already")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := sb.Stream(ctx, []string{"drip", "40", "100"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	js, err := jetstream.New(env.Conn("operator"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Next()
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 3*time.Second, func() error {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if n := info.State.Consumers; n != 0 {
			return fmt.Errorf("SBX_OUT has %d consumers while the stream is read", n)
		}
		return nil
	})
	want := 1
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Seq == first.Seq {
			continue
		}
		want++
		if got := string(c.Data); got != fmt.Sprintf("drip %d\n", want) {
			t.Fatalf("chunk %d is %q, want drip %d", c.Seq, got, want)
		}
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if want != 40 || string(first.Data) != "drip 1\n" {
		t.Fatalf("read %d lines, the first %q", want, first.Data)
	}
}
