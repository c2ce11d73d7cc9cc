package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestDripCannotDodgeTheShare: a process that writes a few bytes at a
// time, each write alone in its chunk (one per flush interval), stores in
// SBX_OUT a message per write, whose subject and headers weigh ten times
// its data. The share counts what the stream stores, not only the data: the
// sandbox's messages stay within its share (and one exit marker).
func TestDripCannotDodgeTheShare(t *testing.T) {
	const share = 4 << 10
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) { c.MaxSandboxOutputBytes = share }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	// "drip 300 7": 300 lines of about 9 bytes, one every 7 ms (the flush
	// interval is 5 ms): 2.7 KB of data, under the share.
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "300", "7"}})
	if err != nil {
		t.Fatal(err)
	}
	data := 0
	for c, err := range p.Chunks() {
		if err != nil {
			break
		}
		data += len(c.Data)
	}
	res, err := p.Wait()
	if err == nil && res != nil && res.Err != nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, events.ErrOutputShareExceeded) {
		t.Fatal(err)
	}
	stored, msgs := storedBytes(t, ctx, js, events.OutputFilter(env.Client.Tenant(), sb.SandboxID, p.ProcessID))
	t.Logf("share %d: %d data bytes delivered in %d messages, %d bytes stored with subjects and headers (err %v)", share, data, msgs, stored, err)
	const marker = 1 << 10 // the exit marker, outside the share
	if stored > share+marker {
		t.Errorf("the sandbox stored %d bytes in SBX_OUT, share %d: its subjects and headers are not counted", stored, share)
	}
}

// TestMarkersCountInTheShare: streamed execs without output each store an
// exit marker; the markers count in the share and, once they take the
// sandbox markerSlack (64 KiB) past it, its streamed execs are refused
// with SBX_E1706, so that a loop of them cannot fill SBX_OUT uncounted.
func TestMarkersCountInTheShare(t *testing.T) {
	const (
		share = 4 << 10
		slack = 64 << 10
	)
	env := sbxtest.Start(t, sbxtest.Options{Worker: func(c *worker.Config) { c.MaxSandboxOutputBytes = share }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	ran, refused := 0, 0
	for range 200 {
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"write", "0"}})
		if errors.Is(err, events.ErrOutputShareExceeded) {
			refused++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil && !errors.Is(err, events.ErrOutputShareExceeded) {
			t.Fatal(err)
		}
		ran++
	}
	stored, msgs := storedBytes(t, ctx, js, "sbx.out."+env.Client.Tenant()+"."+sb.SandboxID+".>")
	t.Logf("200 streamed execs without output: %d ran, %d refused; SBX_OUT holds %d of the sandbox's messages, %d bytes", ran, refused, msgs, stored)
	if refused == 0 {
		t.Errorf("no streamed exec refused: the exit markers are not counted")
	}
	if stored > share+slack+4<<10 {
		t.Errorf("the sandbox stored %d bytes of exit markers, share %d and slack %d", stored, share, slack)
	}
}

// storedBytes is what SBX_OUT holds under filter, counting each message's
// subject, headers and framing with its data, and how many messages.
func storedBytes(t *testing.T, ctx context.Context, js jetstream.JetStream, filter string) (stored, msgs int) {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, events.StreamOutput, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			size := len(m.Subject()) + len(m.Data()) + len("NATS/1.0\r\n\r\n")
			for k, vs := range m.Headers() {
				for _, v := range vs {
					size += len(k) + len(v) + len(": \r\n")
				}
			}
			stored += size
		}
		if n == 0 {
			return stored, msgs
		}
		msgs += n
	}
}
