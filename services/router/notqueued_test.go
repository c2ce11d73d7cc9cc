package router_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// lossyJS loses the ack of the next exec command the router publishes
// (storing it first or not), and fails its re-publications until
// downUntil: a JetStream leader election seen from the router.
type lossyJS struct {
	jetstream.JetStream
	store bool
	down  time.Duration // from the loss

	mu        sync.Mutex
	armed     bool
	lost      string // Nats-Msg-Id of the lost command
	downUntil time.Time
}

func (l *lossyJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	l.mu.Lock()
	lose := l.armed && strings.HasSuffix(m.Subject, "."+events.Verb(events.OpExec))
	if lose {
		l.armed, l.lost, l.downUntil = false, m.Header.Get(events.HeaderMsgID), time.Now().Add(l.down)
	}
	l.mu.Unlock()
	if !lose {
		return l.JetStream.PublishMsgAsync(m, opts...)
	}
	if l.store {
		if _, err := l.JetStream.PublishMsg(context.Background(), m); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("lossy: the ack was lost")
}

func (l *lossyJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	l.mu.Lock()
	down := l.lost != "" && m.Header.Get(events.HeaderMsgID) == l.lost && time.Now().Before(l.downUntil)
	l.mu.Unlock()
	if down {
		return nil, errors.New("lossy: no ack")
	}
	return l.JetStream.PublishMsg(ctx, m, opts...)
}

// Item 4: a command answered "not queued" (SBX_E1601) must never run. The
// exec's publish ack is lost and the bus answers the router's
// re-publications only after the exec's Sbx-Not-After (1 s here). Stored
// before its ack was lost, a worker took it in time and ran it: the caller
// gets its result, not SBX_E1601. Never stored, it is stored only past its
// Sbx-Not-After: the caller gets SBX_E1601 and no worker runs it.
func TestNotQueuedIsNeverRunLater(t *testing.T) {
	cases := []struct {
		name   string
		stored bool
	}{
		{"stored before the ack was lost", true},
		{"not stored", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &lossyJS{store: tc.stored, down: 1500 * time.Millisecond}
			router.WrapJetStream(t, func(js jetstream.JetStream) jetstream.JetStream { l.JetStream = js; return l })
			env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.QueueTimeout = time.Second }})
			sb := env.Create(ctx(t))
			l.mu.Lock()
			l.armed = true
			l.mu.Unlock()
			pid := events.NewID()
			res, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: pid, Cmd: []string{"sleep", "2500"}})
			ran := func() bool {
				for _, c := range env.Fake.CallsTo("Exec") {
					if c.ProcessID == pid {
						return true
					}
				}
				return false
			}
			if tc.stored {
				if errors.Is(err, events.ErrBackendUnavailable) && ran() {
					t.Fatalf("the exec was answered not queued (%q) and ran", err)
				}
				if err != nil {
					t.Fatalf("exec stored before its ack was lost, run by a worker: %q, want its result", err)
				}
				if res.ExitCode != 0 {
					t.Fatalf("exec: exit %d", res.ExitCode)
				}
				return
			}
			if !errors.Is(err, events.ErrBackendUnavailable) {
				t.Fatalf("exec never stored in time: %v, want %s", err, events.CodeBackendUnavailable)
			}
			// The command is in SBX_CMD now, past its Sbx-Not-After: give the
			// worker every chance to (wrongly) run it.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				if ran() {
					t.Fatal("an exec answered not queued (SBX_E1601) reached the backend later")
				}
				time.Sleep(50 * time.Millisecond) // observing that nothing happens
			}
		})
	}
}
