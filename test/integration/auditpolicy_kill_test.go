package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestAuditFailKillKeepsBothRecords: under audit policy fail a kill is not
// refused when its opened record cannot be stored in time (a kill must not
// wait on the audit trail), so that record is retried like a closed one:
// once SBX_OPS stores again, the kill has both records. The opened record
// used to be dropped, leaving a closed record with no opening.
func TestAuditFailKillKeepsBothRecords(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLogger(), Worker: func(c *worker.Config) {
		c.AuditPolicy = worker.AuditFail
		c.AuditTimeout = 100 * time.Millisecond
	}})
	js, err := jetstream.New(env.Conn("breaker"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return env.RecordsUnsettled() == 0 }, "the create's records were never stored")
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full := info.Config
	full.MaxMsgs, full.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatalf("fill SBX_OPS: %v", err)
	}

	kill, err := env.Client.Kill(ctx, sb.SandboxID)
	if err != nil {
		t.Fatalf("kill under a full SBX_OPS: %v", err)
	}
	if kill.State != events.StateGone {
		t.Fatalf("kill: %+v", kill)
	}
	if _, err := js.UpdateStream(ctx, info.Config); err != nil { // room again
		t.Fatalf("restore SBX_OPS: %v", err)
	}
	phases := map[string]bool{}
	sbxtest.Eventually(t, 60*time.Second, func() bool {
		for _, phase := range []string{events.EventOpened, events.EventClosed} {
			m, err := s.GetLastMsgForSubject(ctx, events.OpsSubject("fake", sb.SandboxID, phase))
			if err != nil {
				continue
			}
			env, err := cemsg.Decode(m.Header, m.Data)
			var rec events.OpRecord
			if err == nil && json.Unmarshal(env.Data, &rec) == nil && rec.Kind == events.OpKill {
				phases[phase] = true
			}
		}
		return phases[events.EventOpened] && phases[events.EventClosed]
	}, "the kill's records in SBX_OPS: %v, want opened and closed", phases)
}
