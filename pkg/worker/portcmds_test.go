package worker_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// TestPortsSurviveAWorkerRestart: a worker restarted under the same id
// keeps the published ports (they are in the registry record it
// re-adopts), goes on changing them, and keeps them through its other
// record writes; the records of the ports ops hold neither the token nor
// its hash.
func TestPortsSurviveAWorkerRestart(t *testing.T) {
	b := fake.New(fake.Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Logger: testLog(t), Worker: func(c *worker.Config) { c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	p, err := sb.ExposePort(ctx, 8000, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.ExposePort(ctx, 3000, events.PortPublic); err != nil {
		t.Fatal(err)
	}
	restartWith(t, env, b)

	sbxtest.Eventually(t, 20*time.Second, func() bool {
		_, err := sb.UnexposePort(ctx, 3000) // served by the restarted worker
		return err == nil
	}, "the restarted worker never served unexpose")
	if _, err := sb.SetTimeout(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	rot, err := env.Client.PortToken(ctx, events.PortsTokenRequest{SandboxID: sb.ID(), Port: 8000, Rotate: true})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := sb.ListPorts(ctx)
	if err != nil || len(ports) != 1 || ports[0].Port != 8000 || ports[0].Access != events.PortPrivate {
		t.Fatalf("ports after the restart: %v %+v", err, ports)
	}
	js, err := jetstream.New(env.Conn("reader"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	hash := portauth.Hash(rot.Token)
	if !bytes.Contains(entry.Value(), []byte(hash)) {
		t.Fatalf("the record does not keep the rotated token's hash: %s", entry.Value())
	}

	// No record of the ports ops shows a token or a hash.
	env.WaitOpened(t, "fake", sb.ID(), events.OpPortsToken, 1)
	cons, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OpsSubject("fake", sb.ID(), ">")}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for m := range batch.Messages() {
		seen++
		for _, secret := range []string{p.Token, rot.Token, portauth.Hash(p.Token), hash} {
			if bytes.Contains(m.Data(), []byte(secret)) {
				t.Fatalf("record %s shows a token or its hash: %s", m.Subject(), m.Data())
			}
		}
	}
	if seen < 8 {
		t.Fatalf("only %d records of the sandbox", seen)
	}
}
