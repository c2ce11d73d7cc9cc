package authtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestNoServiceCanRepublishIntoCommands: a stream's RePublish is published
// by the server, not by the user who configured it, so whoever may create
// or update a stream could make the server publish commands on sbx.cmd.>
// (or replies, output, records) past their own permissions. No service
// credential may set a stream's configuration (ADR 35: the operator's
// `sandboxio bus init` does, as admin): the server refuses each of them
// every stream create, update and restore, and SBX_CMD stays empty.
func TestNoServiceCanRepublishIntoCommands(t *testing.T) {
	env := Start(t)
	admin, err := jetstream.New(env.Connect(t, env.Creds(auth.RoleAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	const target = "sbx.cmd.x.node.y.exec"
	for _, role := range []string{auth.RoleRouter, auth.RoleWorker, auth.RoleReaper, auth.RoleAuditor} {
		t.Run(role, func(t *testing.T) {
			nc := env.Connect(t, env.Creds(role))
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			evil := jetstream.StreamConfig{Name: "EVIL_" + role, Subjects: []string{"evil." + role}, Storage: jetstream.MemoryStorage,
				RePublish: &jetstream.RePublish{Source: "evil." + role, Destination: target}}
			mirror := jetstream.StreamConfig{Name: "MIRROR_" + role, Storage: jetstream.MemoryStorage,
				Mirror: &jetstream.StreamSource{Name: events.StreamOps}, RePublish: &jetstream.RePublish{Source: ">", Destination: target}}
			ops := streamConfig(t, admin, events.StreamOps)
			ops.RePublish = &jetstream.RePublish{Source: events.SubjectOpsAll, Destination: target}
			reg := streamConfig(t, admin, "KV_"+events.BucketRegistry)
			reg.RePublish = &jetstream.RePublish{Source: "$KV." + events.BucketRegistry + ".>", Destination: target}
			cases := []struct {
				name string
				do   func(ctx context.Context) error
			}{
				{"create a stream republishing to " + target, func(ctx context.Context) error {
					_, err := js.CreateStream(ctx, evil)
					return err
				}},
				{"create a mirror of SBX_OPS republishing to " + target, func(ctx context.Context) error {
					_, err := js.CreateStream(ctx, mirror)
					return err
				}},
				{"update SBX_OPS to republish to " + target, func(ctx context.Context) error {
					_, err := js.UpdateStream(ctx, ops)
					return err
				}},
				{"update a bucket's stream to republish to " + target, func(ctx context.Context) error {
					_, err := js.UpdateStream(ctx, reg)
					return err
				}},
				{"restore a stream", func(ctx context.Context) error {
					_, err := nc.Request("$JS.API.STREAM.RESTORE.EVIL", []byte(`{}`), 500*time.Millisecond)
					return err
				}},
			}
			for _, c := range cases {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				err := c.do(cctx)
				ccancel()
				if err == nil {
					t.Errorf("%s: %s: the server took it", role, c.name)
				}
			}
			// Had a create or update passed, these would land in SBX_CMD.
			_ = nc.Publish("evil."+role, []byte(`{}`))
			_ = nc.Flush()
			for _, name := range []string{evil.Name, mirror.Name} {
				if _, err := admin.Stream(ctx, name); err == nil {
					t.Errorf("%s created stream %s", role, name)
				}
			}
			for _, name := range []string{events.StreamOps, "KV_" + events.BucketRegistry} {
				if rp := streamConfig(t, admin, name).RePublish; rp != nil {
					t.Errorf("%s set %s's RePublish to %+v", role, name, *rp)
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := admin.Stream(ctx, events.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.SubjectCmdBallast))
	if err != nil {
		t.Fatal(err)
	}
	// The router's ballast (pkg/bus.RunBallast) is the router's own.
	if n := info.State.Msgs - info.State.Subjects[events.SubjectCmdBallast]; n != 0 {
		t.Fatalf("SBX_CMD holds %d messages the router never sent", n)
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}
