package integration

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestReplayedCommandRefused: a services user that read a router-signed
// command off SBX_CMD (or kept one it saw) and publishes it again, after
// its Sbx-Not-After, with the deadline stripped or moved and a fresh
// Nats-Msg-Id (neither is what the stream's duplicate window or the
// worker's expiry check can see through), gets SBX_E1401: the deadline is
// signed with the command. The genuine command, late, is SBX_E1608, and
// none of them runs.
func TestReplayedCommandRefused(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	execs := len(env.Fake.CallsTo("Exec"))
	admin := env.Conn("admin")
	nodeExec := events.NodeSubject("fake", env.WorkerID, events.Verb(events.OpExec))
	data, _ := json.Marshal(events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: events.NewID(), Cmd: []string{"echo", "replayed"}})
	inbox := nats.NewInbox()
	sub, err := admin.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The command as the router signed it, its deadline past.
	signed, err := cemsg.Encode(nodeExec, cemsg.Envelope{ID: events.NewID(), Type: events.CommandType(events.OpExec),
		Source: "sandboxio/router/r1", Subject: sb.SandboxID, ReplyTo: inbox, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	signed.Header.Set(events.HeaderNotAfter, events.FormatNotAfter(time.Now().Add(-time.Second)))
	env.SignCommand(signed)
	for _, tc := range []struct {
		name   string
		change func(h nats.Header)
		want   error
	}{
		{"as signed, late", func(nats.Header) {}, events.ErrCommandExpired},
		{"deadline stripped", func(h nats.Header) { h.Del(events.HeaderNotAfter) }, events.ErrUnauthorized},
		{"deadline moved on", func(h nats.Header) {
			h.Set(events.HeaderNotAfter, events.FormatNotAfter(time.Now().Add(time.Minute)))
		}, events.ErrUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(signed.Subject)
			m.Data = signed.Data
			for k, v := range signed.Header {
				m.Header[k] = append([]string(nil), v...)
			}
			m.Header.Set("Nats-Msg-Id", events.NewID())
			tc.change(m.Header)
			if err := admin.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			r, err := sub.NextMsgWithContext(rctx)
			if err != nil {
				t.Fatalf("no answer from the worker: %v", err)
			}
			if e := events.DecodeError(r.Data); e == nil || !errors.Is(e, tc.want) {
				t.Fatalf("answer %s, want %v", r.Data, tc.want)
			}
		})
	}
	if n := len(env.Fake.CallsTo("Exec")); n != execs {
		t.Fatalf("the backend ran %d replayed execs", n-execs)
	}
}
