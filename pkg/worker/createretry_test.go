package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// TestRetriedCreateClaim: a create whose id is claimed already, by the
// same tenant with the same spec hash, is a retry (ADR 37). It answers a
// running sandbox, takes over a claim that never started only when its op
// is later than the claim's, and never makes again a sandbox that ran.
func TestRetriedCreateClaim(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc := env.Conn("test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	const hash = "h1"
	started := time.Now().UTC().Add(-time.Minute)
	tests := []struct {
		name string
		// claim is the record found; its CreateOp is earlier than the
		// command's unless laterClaim.
		claim      events.Sandbox
		laterClaim bool
		cmdHash    string
		want       events.Code // "" success
		creates    int         // backend creates of the id
	}{
		{"running", events.Sandbox{State: events.StateRunning, Worker: "another", SpecHash: hash, StartedAt: &started}, false, hash, "", 0},
		{"claim of a lost worker, later op", events.Sandbox{State: events.StateCreating, Worker: "died-mid-create", SpecHash: hash}, false, hash, "", 1},
		{"failed create, later op", events.Sandbox{State: events.StateGone, SpecHash: hash}, false, hash, "", 1},
		{"failed create, earlier op", events.Sandbox{State: events.StateGone, SpecHash: hash}, true, hash, events.CodeSandboxExists, 0},
		{"ran and ended", events.Sandbox{State: events.StateGone, SpecHash: hash, StartedAt: &started}, false, hash, events.CodeSandboxGone, 0},
		{"lost after it ran", events.Sandbox{State: events.StateLost, SpecHash: hash, StartedAt: &started}, false, hash, events.CodeSandboxGone, 0},
		{"other spec", events.Sandbox{State: events.StateGone, SpecHash: hash}, false, "h2", events.CodeSandboxGone, 0},
		{"other spec, claimed", events.Sandbox{State: events.StateCreating, Worker: "died-mid-create", SpecHash: hash}, false, "h2", events.CodeSandboxExists, 0},
		{"no hash", events.Sandbox{State: events.StateCreating, Worker: "died-mid-create"}, false, "", events.CodeSandboxExists, 0},
		{"other tenant", events.Sandbox{State: events.StateGone, SpecHash: hash, Tenant: "tenant-other"}, false, hash, events.CodeSandboxGone, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := events.NewID()
			first, second := events.NewID(), events.NewID()
			for second <= first {
				second = events.NewID()
			}
			claimOp, cmdOp := first, second
			if tc.laterClaim {
				claimOp, cmdOp = second, first
			}
			deadline := time.Now().Add(5 * time.Minute).UTC()
			rec := tc.claim
			rec.SandboxID, rec.Backend, rec.CreateOp, rec.Deadline, rec.CreatedAt = id, "fake", claimOp, deadline, time.Now().UTC()
			b, _ := json.Marshal(rec)
			if _, err := registry.Create(ctx, id, b); err != nil {
				t.Fatal(err)
			}
			reply := sendCreate(ctx, t, env, js, nc, cmdOp, events.CreateCommand{SandboxID: id, Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
				Request: events.CreateRequest{TimeoutS: 300}, Deadline: deadline, SpecHash: tc.cmdHash})
			if tc.want == "" {
				var r events.CreateReply
				if e := events.DecodeError(reply); e != nil || json.Unmarshal(reply, &r) != nil || r.SandboxID != id {
					t.Fatalf("retried create answered %s, want the sandbox %s", reply, id)
				}
				entry, err := registry.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				var got events.Sandbox
				wantOp := cmdOp // taken over
				if tc.creates == 0 {
					wantOp = claimOp // answered as it is
				}
				if err := json.Unmarshal(entry.Value(), &got); err != nil || got.State != events.StateRunning || got.CreateOp != wantOp || got.StartedAt == nil {
					t.Fatalf("record after the take-over: %s", entry.Value())
				}
			} else if e := events.DecodeError(reply); e == nil || e.Code != tc.want {
				t.Fatalf("retried create answered %s, want %s", reply, tc.want)
			}
			n := 0
			for _, c := range env.Fake.CallsTo("Create") {
				if c.SandboxID == id {
					n++
				}
			}
			if n != tc.creates {
				t.Fatalf("the backend created %s %d times, want %d", id, n, tc.creates)
			}
		})
	}
}

// sendCreate publishes a signed create command with op id op and returns
// the worker's reply.
func sendCreate(ctx context.Context, t *testing.T, env *sbxtest.Env, js jetstream.JetStream, nc *nats.Conn, op string, cmd events.CreateCommand) []byte {
	t.Helper()
	sub := publishRetryCreate(ctx, t, env, js, nc, op, cmd)
	reply, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no answer to the create: %v", err)
	}
	return reply.Data
}

// publishRetryCreate publishes a signed create command with op id op; its reply
// comes on the subscription returned.
func publishRetryCreate(ctx context.Context, t *testing.T, env *sbxtest.Env, js jetstream.JetStream, nc *nats.Conn, op string, cmd events.CreateCommand) *nats.Subscription {
	t.Helper()
	data, _ := json.Marshal(cmd)
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	m, err := cemsg.Encode(events.CreateSubject("fake"), cemsg.Envelope{ID: op, Type: events.CommandType(events.OpCreate),
		Source: "test/retry", ReplyTo: inbox, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	env.SignCommand(m)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestRetryWaitsThenTakesOver: a retry of a create that a live worker is
// still making waits for it; when that worker's lease ends instead (it
// died mid-create), the retry takes the claim over and makes the sandbox.
func TestRetryWaitsThenTakesOver(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := env.Conn("test")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := js.KeyValue(ctx, events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	lease, _ := json.Marshal(events.WorkerLease{Backend: "fake", Worker: "slow-creator", HeartbeatAt: time.Now().UTC()})
	leaseKey := events.WorkerKey("fake", "slow-creator")
	if _, err := leases.Put(ctx, leaseKey, lease); err != nil {
		t.Fatal(err)
	}
	id, claimOp := events.NewID(), events.NewID()
	cmdOp := events.NewID()
	for cmdOp <= claimOp {
		cmdOp = events.NewID()
	}
	deadline := time.Now().Add(5 * time.Minute).UTC()
	b, _ := json.Marshal(events.Sandbox{SandboxID: id, Backend: "fake", Worker: "slow-creator", State: events.StateCreating,
		CreateOp: claimOp, SpecHash: "h1", Deadline: deadline, CreatedAt: time.Now().UTC()})
	if _, err := registry.Create(ctx, id, b); err != nil {
		t.Fatal(err)
	}
	sub := publishRetryCreate(ctx, t, env, js, nc, cmdOp, events.CreateCommand{SandboxID: id, Spec: events.ClassSpec{Name: "fake", Backend: "fake"},
		Request: events.CreateRequest{TimeoutS: 300}, Deadline: deadline, SpecHash: "h1"})
	replied := make(chan []byte, 1)
	go func() {
		if m, err := sub.NextMsgWithContext(ctx); err == nil {
			replied <- m.Data
		}
	}()
	select {
	case r := <-replied:
		t.Fatalf("the retry answered %s while the first create was in progress, want it to wait", r)
	case <-time.After(1500 * time.Millisecond): // it waits: nothing to observe but the absence of an answer
	}
	if err := leases.Delete(ctx, leaseKey); err != nil {
		t.Fatal(err)
	}
	var reply []byte
	select {
	case reply = <-replied:
	case <-ctx.Done():
		t.Fatal("no answer to the retry after the first creator's lease ended")
	}
	var r events.CreateReply
	if e := events.DecodeError(reply); e != nil || json.Unmarshal(reply, &r) != nil || r.SandboxID != id {
		t.Fatalf("retry answered %s, want the sandbox %s", reply, id)
	}
	if live := env.Fake.Live(); len(live) != 1 || live[0] != id {
		t.Fatalf("live sandboxes %v, want [%s]", live, id)
	}
}

// TestTakenOverClaimIsNotEnded: a worker whose claim was taken over by a
// retry while its backend worked (it was thought lost) removes what it
// made, and leaves the record alone: it is the retry's now.
func TestTakenOverClaimIsNotEnded(t *testing.T) {
	fb := fake.New(fake.Config{CreateDelay: time.Second})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fb})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("test"))
	if err != nil {
		t.Fatal(err)
	}
	registry, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	const id = "taken-over"
	done := make(chan error, 1)
	go func() {
		_, err := env.Client.Create(ctx, events.CreateRequest{SandboxID: id, TimeoutS: 300})
		done <- err
	}()
	var entry jetstream.KeyValueEntry
	poll.Eventually(t, 10*time.Second, func() error {
		if len(fb.CallsTo("Create")) == 0 {
			return errors.New("the create has not reached the backend")
		}
		entry, err = registry.Get(ctx, id)
		return err
	})
	var rec events.Sandbox
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	retryOp := events.NewID()
	rec.CreateOp, rec.Worker = retryOp, "retry-worker"
	b, _ := json.Marshal(rec)
	if _, err := registry.Update(ctx, id, b, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("create whose claim was taken over: %v, want SandboxGone", err)
	}
	if live := fb.Live(); len(live) != 0 {
		t.Fatalf("live sandboxes %v: the first create's must be removed", live)
	}
	entry, err = registry.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var after events.Sandbox
	if err := json.Unmarshal(entry.Value(), &after); err != nil || after.CreateOp != retryOp || after.State != events.StateCreating {
		t.Fatalf("the retry's record was overwritten: %s", entry.Value())
	}
}
