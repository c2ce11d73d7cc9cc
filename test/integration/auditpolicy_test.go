package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestAuditPolicy: with SBX_OPS unable to store, a worker under audit policy
// fail refuses an exec with SBX_E1501 AuditUnavailable and runs nothing in
// the backend; under warn the same exec runs.
func TestAuditPolicy(t *testing.T) {
	breakOps := map[string]func(ctx context.Context, t *testing.T, js jetstream.JetStream){
		"stream deleted": func(ctx context.Context, t *testing.T, js jetstream.JetStream) {
			if err := js.DeleteStream(ctx, events.StreamOps); err != nil {
				t.Fatalf("delete SBX_OPS: %v", err)
			}
		},
		"stream full, discard new": func(ctx context.Context, t *testing.T, js jetstream.JetStream) {
			s, err := js.Stream(ctx, events.StreamOps)
			if err != nil {
				t.Fatal(err)
			}
			// SBX_OPS denies purge (docs/security.md): it is full once it
			// may hold no more than it holds now.
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cfg := info.Config
			cfg.MaxMsgs, cfg.Discard = int64(max(info.State.Msgs, 1)), jetstream.DiscardNew
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatalf("limit SBX_OPS: %v", err)
			}
			if info.State.Msgs == 0 {
				if _, err := js.Publish(ctx, "sbx.ops.fake._.opened", []byte("{}")); err != nil {
					// The create's own records, published without waiting
					// (and signed in their window, ADR 17), may have filled
					// it between Info and here: full is what is wanted.
					if now, ierr := s.Info(ctx); ierr != nil || now.State.Msgs < uint64(cfg.MaxMsgs) {
						t.Fatalf("filler: %v", err)
					}
				}
			}
		},
	}
	for _, policy := range []string{worker.AuditFail, worker.AuditWarn} {
		for how, breakIt := range breakOps {
			t.Run(policy+"/"+how, func(t *testing.T) {
				env := sbxtest.Start(t, sbxtest.Options{Logger: testLogger(), Worker: func(c *worker.Config) {
					c.AuditPolicy = policy
					c.AuditTimeout = 100 * time.Millisecond
				}})
				js, err := jetstream.New(env.Conn("breaker"))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				sb := env.Create(ctx)
				breakIt(ctx, t, js)

				pid := events.NewID()
				start := time.Now()
				res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: pid, Cmd: []string{"echo", "ran"}})
				ran := false
				for _, c := range env.Fake.CallsTo("Exec") {
					ran = ran || c.ProcessID == pid
				}
				switch policy {
				case worker.AuditFail:
					if !errors.Is(err, events.ErrAuditUnavailable) {
						t.Fatalf("exec: want SBX_E1501 AuditUnavailable, got %v %+v", err, res)
					}
					if ran {
						t.Errorf("the backend ran the refused exec")
					}
					if d := time.Since(start); d > 5*time.Second {
						t.Errorf("refusal took %s; AuditTimeout is 100ms", d)
					}
				default:
					if err != nil || string(res.Stdout) != "ran\n" {
						t.Fatalf("exec under warn: %v %+v", err, res)
					}
					if !ran {
						t.Errorf("the backend did not run the exec")
					}
				}
			})
		}
	}
}
