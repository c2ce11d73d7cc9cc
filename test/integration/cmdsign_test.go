package integration

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestUnsignedCommandsRefused: the server does not apply a user's publish
// permissions to what a stream republishes, so whoever may configure a
// stream can land a command on SBX_CMD through its RePublish (no service
// may: ADR 35; an operator may), and admin may publish there outright.
// Neither holds the router's or the reaper's signing key: the worker
// refuses every such command with SBX_E1401 and nothing runs, while the
// router's own commands keep working.
func TestUnsignedCommandsRefused(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
	if err != nil {
		t.Fatal(err)
	}
	accA := env.Auth.TenantAccount(authtest.TenantA)
	execs, creates := len(env.Fake.CallsTo("Exec")), len(env.Fake.CallsTo("Create"))

	worker := env.Auth.Connect(t, env.Auth.Creds(auth.RoleWorker))
	admin := env.Conn("admin")
	nodeExec := events.NodeSubject("fake", env.WorkerID, events.Verb(events.OpExec))
	// The worker's creds may not publish to sbx.cmd.>, nor create a stream
	// that republishes into it (ADR 35: no service configures a stream).
	// A stream an operator made may still republish there, and whatever it
	// lands is unsigned: the worker must refuse it.
	wjs, err := jetstream.New(worker)
	if err != nil {
		t.Fatal(err)
	}
	evil := "evil." + events.NewID()
	evilStream := jetstream.StreamConfig{Name: "EVIL_" + events.NewID(), Subjects: []string{evil + ".>"},
		Storage: jetstream.MemoryStorage, RePublish: &jetstream.RePublish{Source: evil + ".cmd", Destination: nodeExec}}
	refuseCtx, refuseCancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = wjs.CreateStream(refuseCtx, evilStream)
	refuseCancel()
	if err == nil {
		t.Fatal("the worker's creds created a stream that republishes into SBX_CMD")
	}
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(ctx, evilStream); err != nil {
		t.Fatalf("create the republishing stream as an operator: %v", err)
	}
	stranger, err := recsign.NewKey(nil) // a key nobody trusts
	if err != nil {
		t.Fatal(err)
	}

	execCmd := func() []byte {
		b, _ := json.Marshal(events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: events.NewID(), Cmd: []string{"echo", "pwned"}})
		return b
	}
	createCmd := func() []byte {
		b, _ := json.Marshal(events.CreateCommand{SandboxID: events.NewID(), Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
			Request: events.CreateRequest{TimeoutS: 300}, Deadline: time.Now().Add(300 * time.Second), Tenant: accA})
		return b
	}
	for _, tc := range []struct {
		name    string
		nc      *nats.Conn
		subject string // where the attacker publishes
		op      string
		data    []byte
		sign    *recsign.Key
	}{
		{"exec republished by an operator's stream", worker, evil + ".cmd", events.OpExec, execCmd(), nil},
		{"exec republished, signed by an untrusted key", worker, evil + ".cmd", events.OpExec, execCmd(), stranger},
		{"create published by admin", admin, events.CreateSubject("fake"), events.OpCreate, createCmd(), nil},
		{"create by admin, signed by an untrusted key", admin, events.CreateSubject("fake"), events.OpCreate, createCmd(), stranger},
		{"exec published by admin", admin, nodeExec, events.OpExec, execCmd(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inbox := nats.NewInbox()
			sub, err := tc.nc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			m, err := cemsg.Encode(tc.subject, cemsg.Envelope{ID: events.NewID(), Type: events.CommandType(tc.op),
				Source: "sandboxio/router/forged", Subject: sb.SandboxID, ReplyTo: inbox, Data: tc.data})
			if err != nil {
				t.Fatal(err)
			}
			if tc.sign != nil {
				// Signed for the subject the worker will see it on.
				published := m.Subject
				if tc.op == events.OpExec {
					m.Subject = nodeExec
				}
				if err := tc.sign.Sign(m); err != nil {
					t.Fatal(err)
				}
				m.Subject = published
			}
			if err := tc.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			r, err := sub.NextMsgWithContext(rctx)
			if err != nil {
				t.Fatalf("no answer from the worker: %v", err)
			}
			if e := events.DecodeError(r.Data); e == nil || !errors.Is(e, events.ErrUnauthorized) {
				t.Fatalf("answer %s, want SBX_E1401", r.Data)
			}
		})
	}
	if n := len(env.Fake.CallsTo("Exec")); n != execs {
		t.Fatalf("the backend ran %d forged execs", n-execs)
	}
	if n := len(env.Fake.CallsTo("Create")); n != creates {
		t.Fatalf("the backend ran %d forged creates", n-creates)
	}

	// Normal traffic: the router's signed commands run.
	res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a genuine exec: %+v %v", res, err)
	}
	if n := len(env.Fake.CallsTo("Exec")); n != execs+1 {
		t.Fatalf("the backend ran %d execs, want the one genuine exec", n-execs)
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatalf("a genuine kill: %v", err)
	}
	t.Logf("5 forged commands (republished, published by admin, signed by a stranger) refused with SBX_E1401; genuine exec and kill ran")
}
