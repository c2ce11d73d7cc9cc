package sbxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// WaitOpened waits until SBX_OPS holds the opened records of n operations
// of kind (events.OpExec…) on a sandbox of backend: they are stored (a
// worker's records are published off the operation's path, so that an
// operation can be running before its record is).
func (e *Env) WaitOpened(t testing.TB, backend, sandboxID, kind string, n int) {
	t.Helper()
	js, err := jetstream.New(e.Conn("records"))
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.OpsSubject(backend, sandboxID, events.EventOpened)}})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for {
			batch, err := cons.FetchNoWait(256)
			if err != nil {
				return err
			}
			got := 0
			for m := range batch.Messages() {
				got++
				env, err := cemsg.Decode(m.Headers(), m.Data())
				if err != nil {
					continue
				}
				var rec events.OpRecord
				if json.Unmarshal(env.Data, &rec) == nil && rec.Kind == kind {
					seen[rec.OpID] = true
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return err
			}
			if got == 0 {
				break
			}
		}
		if len(seen) < n {
			return fmt.Errorf("%d opened %s records, want %d", len(seen), kind, n)
		}
		return nil
	})
}
