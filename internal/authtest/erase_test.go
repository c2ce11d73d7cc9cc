package authtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestNoServiceCanEraseTheRecord: the audit checkpoints (KV sbx_audit),
// the tenants' limits (KV sbx_tenants) and the operation records (SBX_OPS)
// are written by admin or one service only, and no service credential may
// delete a message from them, purge them or delete them (ADR 35): a purge
// of KV_sbx_tenants would drop every tenant to the default limits, and a
// deleted checkpoint would hide a cut-off audit tail. The server refuses
// each attempt and every stream keeps its messages.
func TestNoServiceCanEraseTheRecord(t *testing.T) {
	env := Start(t)
	admin, err := jetstream.New(env.Connect(t, env.Creds(auth.RoleAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	audit, err := admin.KeyValue(ctx, events.BucketAudit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Put(ctx, "log1", []byte("checkpoint")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, events.OpsSubject("fake", "sb1", "closed"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	streams := []string{"KV_" + events.BucketAudit, "KV_" + events.BucketTenants, events.StreamOps}
	before := map[string]uint64{}
	for _, name := range streams {
		if before[name] = streamMsgs(ctx, t, admin, name); before[name] == 0 {
			t.Fatalf("%s is empty before the test", name)
		}
	}
	for _, role := range []string{auth.RoleRouter, auth.RoleWorker, auth.RoleReaper, auth.RoleAuditor} {
		t.Run(role, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			js, err := jetstream.New(env.Connect(t, env.Creds(role)))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range streams {
				seq := firstSeq(ctx, t, admin, name)
				cases := []struct {
					what string
					do   func(ctx context.Context) error
				}{
					{"msg delete", func(ctx context.Context) error {
						st, err := js.Stream(ctx, name)
						if err != nil {
							return err
						}
						return st.DeleteMsg(ctx, seq)
					}},
					{"purge", func(ctx context.Context) error {
						st, err := js.Stream(ctx, name)
						if err != nil {
							return err
						}
						return st.Purge(ctx)
					}},
					{"delete", func(ctx context.Context) error { return js.DeleteStream(ctx, name) }},
				}
				for _, c := range cases {
					// A refused call is never answered: it ends at this bound.
					cctx, ccancel := context.WithTimeout(ctx, time.Second)
					err := c.do(cctx)
					ccancel()
					if err == nil {
						t.Errorf("%s: %s of %s: the server took it", role, c.what, name)
					}
				}
			}
			for _, name := range streams {
				if n := streamMsgs(ctx, t, admin, name); n != before[name] {
					t.Errorf("%s: %s holds %d messages, had %d", role, name, n, before[name])
				}
			}
		})
	}
}

func streamState(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return info.State
}

func streamMsgs(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	return streamState(ctx, t, js, name).Msgs
}

func firstSeq(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	return streamState(ctx, t, js, name).FirstSeq
}
