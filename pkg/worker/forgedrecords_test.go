package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// TestForgedRecordsDoNotSteerRestart: a worker with a signing key of its
// own (SigningSeed) that restarts reads back only the records it signed. A
// services user that may publish on sbx.ops.> (any worker's creds) cannot
// hide a live exec from the restarted worker with a forged closed record
// (its stream would never end), nor make it kill a process of its
// choosing and answer a reply subject of its choosing with a forged opened
// record.
func TestForgedRecordsDoNotSteerRestart(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	b := &reattacher{Backend: fake.New(fake.Config{})}
	b.reattach = func(worker.ReattachProcess) (worker.ExitStatus, error) {
		return worker.ExitStatus{}, errors.Join(worker.ErrNotReattachable, errors.New("the agent has no such process"))
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Logger: testLog(t), Worker: func(c *worker.Config) {
		c.KillOnShutdown = false
		c.SigningSeed = append([]byte(nil), seed...)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "100000", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	env.WaitOpened(t, "fake", sb.SandboxID, events.OpExec, 1)
	nc := env.Conn("intruder")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	genuine := openedExec(t, ctx, js, sb.SandboxID, p.ProcessID)
	stranger, err := recsign.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(rec events.OpRecord, sign *recsign.Key) {
		t.Helper()
		data, _ := json.Marshal(rec)
		typ := events.TypeOpOpened
		if rec.Phase == events.EventClosed {
			typ = events.TypeOpClosed
		}
		m, err := cemsg.Encode(events.OpsSubject("fake", sb.SandboxID, rec.Phase), cemsg.Envelope{ID: rec.OpID + "-" + rec.Phase,
			Type: typ, Source: "sandboxio/worker/fake/" + env.WorkerID, Subject: sb.SandboxID, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		if sign != nil {
			if err := sign.Sign(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A closed record for the live exec, signed by a stranger.
	closed := genuine
	closed.Phase, closed.Outcome = events.EventClosed, "ok"
	publish(closed, stranger)
	// An opened record of an exec that never was, unsigned, with a reply
	// subject of the intruder's.
	forged := genuine
	forged.OpID, forged.ProcessID = events.NewID(), "forged1"
	forged.Summary = map[string]string{"process_id": "forged1", "reply_to": inbox}
	publish(forged, nil)

	restartWith(t, env, b, seed)
	if _, err := p.Wait(); !errors.Is(err, events.ErrProcessLost) {
		t.Fatalf("the live exec's stream: %v, want ProcessLost", err)
	}
	if m, err := sub.NextMsg(2 * time.Second); err == nil {
		t.Errorf("the restarted worker answered the forged record's reply subject: %s", m.Data)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Contains(b.abandoned, "forged1") || !slices.Contains(b.abandoned, p.ProcessID) {
		t.Errorf("abandoned %v, want only the genuine %s", b.abandoned, p.ProcessID)
	}
}

// openedExec is the opened record of process pid's exec in SBX_OPS.
func openedExec(t *testing.T, ctx context.Context, js jetstream.JetStream, sandboxID, pid string) events.OpRecord {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OpsSubject("fake", sandboxID, events.EventOpened)}})
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
			env, err := cemsg.Decode(m.Headers(), m.Data())
			if err != nil {
				continue
			}
			var rec events.OpRecord
			if json.Unmarshal(env.Data, &rec) == nil && rec.Kind == events.OpExec && (rec.ProcessID == pid || rec.Summary["process_id"] == pid) {
				return rec
			}
		}
		if n == 0 {
			t.Fatalf("no opened record of process %s", pid)
		}
	}
}
