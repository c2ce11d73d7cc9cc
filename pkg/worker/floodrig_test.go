package worker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// floodRig is a system whose SBX_OUT holds streamBytes, with a victim
// sandbox that wrote victimBytes first: the flood tests check that none of
// the victim's output is evicted.
type floodRig struct {
	t             *testing.T
	ctx           context.Context
	env           *sbxtest.Env
	js            jetstream.JetStream
	streamBytes   int
	victimBytes   int
	victimSubject string
}

func newFloodRig(t *testing.T, streamBytes, victimBytes int) *floodRig {
	t.Helper()
	env := sbxtest.Start(t, sbxtest.Options{Bus: func(c *bus.Config) { c.OutputMaxBytes = int64(streamBytes) }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	r := &floodRig{t: t, ctx: ctx, env: env, js: js, streamBytes: streamBytes, victimBytes: victimBytes}
	victim := r.create()
	pid, got, _, err := r.stream(victim, victimBytes)
	if err != nil || got != victimBytes {
		t.Fatalf("victim: %d bytes, %v", got, err)
	}
	r.victimSubject = events.OutputSubject(env.Client.Tenant(), victim, pid, events.Stdout)
	return r
}

func (r *floodRig) create() string {
	sb, err := r.env.Client.Create(r.ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		r.t.Fatal(err)
	}
	return sb.SandboxID
}

// stream runs a streamed exec writing n bytes and reads what reaches the
// client.
func (r *floodRig) stream(id string, n int) (string, int, *events.ExecResult, error) {
	p, err := r.env.Client.Stream(r.ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"write", strconv.Itoa(n)}})
	if err != nil {
		return "", 0, nil, err
	}
	got := 0
	for c, err := range p.Chunks() {
		if err != nil {
			break
		}
		got += len(c.Data)
	}
	res, err := p.Wait()
	return p.ProcessID, got, res, err
}

// victimKept logs what the floods published beside the stream's state and
// fails the test unless all the victim's output is still in the stream.
func (r *floodRig) victimKept(what string, published int) {
	r.t.Helper()
	kept := streamedBytes(r.t, r.ctx, r.js, r.victimSubject)
	info, err := r.js.Stream(r.ctx, events.StreamOutput)
	if err != nil {
		r.t.Fatal(err)
	}
	st := info.CachedInfo().State
	r.t.Logf("%s: %d bytes published (SBX_OUT %d bytes, %d messages, limit %d); victim's output kept: %d of %d bytes",
		what, published, st.Bytes, st.Msgs, r.streamBytes, kept, r.victimBytes)
	if kept != r.victimBytes {
		r.t.Errorf("%s evicted the victim's output: %d of %d bytes left", what, kept, r.victimBytes)
	}
}
