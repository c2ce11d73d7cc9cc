package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestCommandOpFromSignedSubject: a node command's operation is the one its
// signed subject names, not its unsigned ce-type, and a signer runs only
// the operations it is scoped to (the reaper: kill). On a real nats-server
// with the real account layout: the reaper's credential publishes only on
// kill subjects, so an exec dressed as a kill is what it could send.
func TestCommandOpFromSignedSubject(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true})
	k, err := recsign.NewKey(env.SigningSeed(auth.ReaperSigner))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	exec := `{"sandbox_id":"` + sb.SandboxID + `","cmd":["echo","hi"]}`
	for _, tc := range []struct {
		name, as, verb, typ, data string
		code                      events.Code
	}{
		// The reaper's credential and key: an exec on a kill subject.
		{"exec typed on a kill subject", auth.RoleReaper, events.Verb(events.OpKill), events.CommandType(events.OpExec), exec, events.CodeCommandMismatch},
		// The reaper's key on an exec subject (another credential
		// published it): the reaper may command kills only.
		{"exec signed by the reaper", "admin", events.Verb(events.OpExec), events.CommandType(events.OpExec), exec, events.CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := env.Conn(tc.as)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			inbox := "_INBOX." + nats.NewInbox()[len("_INBOX."):]
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			m, _ := cemsg.Encode(events.NodeSubject("fake", env.WorkerID, tc.verb), cemsg.Envelope{ID: events.NewID(),
				Type: tc.typ, Source: "test/reaper", ReplyTo: inbox, Data: []byte(tc.data)})
			if err := k.Sign(m); err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			r, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if e := events.DecodeError(r.Data); e == nil || e.Code != tc.code {
				t.Errorf("answer %s, want %s", r.Data, tc.code)
			}
		})
	}
	if n := len(env.Fake.CallsTo("Exec")); n != 0 {
		t.Fatalf("the backend ran %d execs for the reaper's key", n)
	}
}
