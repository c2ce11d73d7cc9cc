package worker_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestChurnedFloodsCannotEvict: a tenant that floods SBX_OUT from one
// sandbox after another, killing each once cut at its share, does not
// evict a live sandbox's older output either. A sandbox that leaves takes
// its share back, but its output stays in the stream (for late readers,
// within MaxAge): the ledger keeps counting it until the worker, needing
// room, purges the departed output itself, oldest first, so that
// DiscardOld never has to evict (and would evict the oldest, the victim's).
func TestChurnedFloodsCannotEvict(t *testing.T) {
	const (
		streamBytes = 4 << 20
		rounds      = 6
		victimBytes = 64 << 10
	)
	env := sbxtest.Start(t, sbxtest.Options{Bus: func(c *bus.Config) { c.OutputMaxBytes = streamBytes }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	create := func() string {
		sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
		if err != nil {
			t.Fatal(err)
		}
		return sb.SandboxID
	}
	stream := func(id string, n int) (string, int, error) {
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"write", strconv.Itoa(n)}})
		if err != nil {
			return "", 0, err
		}
		got := 0
		for c, err := range p.Chunks() {
			if err != nil {
				break
			}
			got += len(c.Data)
		}
		res, err := p.Wait()
		if err == nil && res != nil && res.Err != nil {
			err = res.Err
		}
		return p.ProcessID, got, err
	}
	victim := create()
	pid, got, err := stream(victim, victimBytes)
	if err != nil || got != victimBytes {
		t.Fatalf("victim: %d bytes, %v", got, err)
	}
	victimSubject := events.OutputSubject(env.Client.Tenant(), victim, pid, events.Stdout)
	total := 0
	for i := range rounds {
		id := create()
		_, got, err := stream(id, streamBytes)
		if err != nil && !errors.Is(err, events.ErrOutputShareExceeded) {
			t.Fatalf("round %d: %v", i, err)
		}
		total += got
		if _, err := env.Client.Kill(ctx, id); err != nil {
			t.Fatalf("round %d: kill: %v", i, err)
		}
	}
	kept := streamedBytes(t, ctx, js, victimSubject)
	info, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	st := info.CachedInfo().State
	t.Logf("%d sandboxes flooded one after another: %d bytes published (SBX_OUT %d bytes, limit %d); victim's output kept: %d of %d bytes",
		rounds, total, st.Bytes, streamBytes, kept, victimBytes)
	if total <= streamBytes {
		t.Fatalf("the floods published %d bytes, not more than the stream holds: the test proves nothing", total)
	}
	if kept != victimBytes {
		t.Errorf("the churned floods evicted the victim's output: %d of %d bytes left", kept, victimBytes)
	}
}
