package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestRecordsSignedInBatches: the records of concurrent execs are signed
// together (ADR 17: one signature over a window's records, each record
// with its proof), every one of them still verifies on its own for the
// worker's key, and an exec's opened record is stored before its closed.
func TestRecordsSignedInBatches(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("t"))
	if err != nil {
		t.Fatal(err)
	}
	lease := leaseOf(t, ctx, js, "fake", env.WorkerID)
	sb := env.Create(ctx)
	const execs = 16
	var wg sync.WaitGroup
	for range execs {
		wg.Go(func() {
			if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var recs []storedRecord
	sbxtest.Eventually(t, 5*time.Second, func() bool {
		recs = recs[:0]
		for _, r := range opsRecords(t, ctx, js, sb.SandboxID) {
			if r.rec.Kind == events.OpExec {
				recs = append(recs, r)
			}
		}
		return len(recs) == 2*execs
	}, "exec records not stored")
	sigs := map[string]bool{}
	batched := 0
	opened := map[string]bool{}
	for _, r := range recs {
		if err := verifyRecord(r, lease.SigningKey); err != nil {
			t.Fatalf("record %s: %v", r.header.Get(events.HeaderCEID), err)
		}
		sigs[r.header.Get(events.HeaderSignature)] = true
		if r.header.Get(events.HeaderSignatureBatch) != "" {
			batched++
		}
		switch r.rec.Phase {
		case events.EventOpened:
			opened[r.rec.OpID] = true
		case events.EventClosed:
			if !opened[r.rec.OpID] {
				t.Errorf("exec %s: closed record stored before its opened one", r.rec.OpID)
			}
		}
	}
	t.Logf("%d exec records under %d signatures (%d signed in batches)", len(recs), len(sigs), batched)
	if batched == 0 || len(sigs) >= len(recs) {
		t.Fatalf("%d records under %d signatures, %d in batches: not signed together", len(recs), len(sigs), batched)
	}
}
