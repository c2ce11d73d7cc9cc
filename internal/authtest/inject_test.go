package authtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestAuditorCannotRepublishIntoCommands: a stream's RePublish is published
// by the server, not by the user who configured it, so whoever may create
// or update a stream could make the server publish commands on sbx.cmd.>
// (or replies, output, records) for it. The auditor only reads: the server
// refuses it every stream create, update and restore, and SBX_CMD stays
// empty.
func TestAuditorCannotRepublishIntoCommands(t *testing.T) {
	env := Start(t)
	nc := env.Connect(t, env.Creds(auth.RoleAuditor))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	evil := jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.*"}, Storage: jetstream.MemoryStorage,
		RePublish: &jetstream.RePublish{Source: "evil.*", Destination: "sbx.cmd.fake.node.w1.{{wildcard(1)}}"}}
	cases := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"create a republishing stream", func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, evil)
			return err
		}},
		{"update a bucket's stream to republish", func(ctx context.Context) error {
			_, err := nc.Request("$JS.API.STREAM.UPDATE.KV_"+events.BucketRegistry, []byte(`{}`), 500*time.Millisecond)
			return err
		}},
		{"restore a stream", func(ctx context.Context) error {
			_, err := nc.Request("$JS.API.STREAM.RESTORE.EVIL", []byte(`{}`), 500*time.Millisecond)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := c.do(ctx); err == nil {
				t.Fatal("the auditor's request was answered")
			}
		})
	}
	// Had the create passed, this publish would land in SBX_CMD as
	// sbx.cmd.fake.node.w1.exec.
	_ = nc.Publish("evil.exec", []byte(`{}`))
	_ = nc.Flush()
	admin, err := jetstream.New(env.Connect(t, env.Creds(auth.RoleAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := admin.Stream(ctx, "EVIL"); err == nil {
		t.Fatal("the auditor created stream EVIL")
	}
	st, err := admin.Stream(ctx, events.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.SubjectCmdBallast))
	if err != nil {
		t.Fatal(err)
	}
	// The router's ballast (internal/bus.RunBallast) is the router's own.
	if n := info.State.Msgs - info.State.Subjects[events.SubjectCmdBallast]; n != 0 {
		t.Fatalf("SBX_CMD holds %d messages the router never sent", n)
	}
}
