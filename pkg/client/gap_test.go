package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestLostTailIsOutputGap: output lost at the end of a stream (no later
// chunk can carry Missing) makes Wait return SBX_E1304 OutputGap with the
// result, instead of a silent success.
func TestLostTailIsOutputGap(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	if env.Auth != nil {
		t.Skip("purges SBX_OUT with the services account's JetStream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := sb.Stream(ctx, []string{"write", "4096", "512"})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range p.Chunks() { // read everything once: no gap
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Wait(); err != nil {
		t.Fatalf("first read: %v", err)
	}
	js, err := jetstream.New(env.Conn("operator"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	subjects := events.StreamSubjectsFor(events.TenantOpen, sb.ID(), p.ProcessID)
	poll.Eventually(t, 10*time.Second, func() error {
		_, err := st.GetLastMsgForSubject(ctx, subjects.Exit)
		return err
	})
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subjects.Stdout)); err != nil {
		t.Fatal(err)
	}
	again, err := sb.Attach(ctx, p.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range again.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := again.Wait()
	if !errors.Is(err, events.ErrOutputGap) || res == nil || res.ExitCode != 0 {
		t.Fatalf("Wait after the tail was purged: %+v, %v; want the result and OutputGap", res, err)
	}
}
