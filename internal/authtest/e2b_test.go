package authtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestE2BFrontDoorRole: the E2B front door's user calls the API naming a
// tenant (the router sees that tenant), reads the API keys and follows
// tenants' live and replay output; it cannot command workers, write or
// read the registry, write keys, read other streams or tunnels.
func TestE2BFrontDoorRole(t *testing.T) {
	env := Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	router := env.Connect(t, env.Creds(auth.RoleRouter))
	infos := make(chan string, 1)
	sub, err := router.Subscribe(events.SubjectAPIPrefix+".>", func(m *nats.Msg) {
		infos <- m.Header.Get(events.HeaderRequestInfo)
		_ = m.Respond([]byte(`{"ok":true}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := router.Flush(); err != nil {
		t.Fatal(err)
	}
	accA := env.TenantAccount(TenantA)
	e2b := env.Connect(t, env.Creds(auth.RoleE2B))
	m := nats.NewMsg(events.APISubject(events.OpCreate))
	m.Header.Set(events.HeaderRequestInfo, `{"acc":"`+accA+`"}`)
	m.Data = []byte(`{}`)
	if _, err := e2b.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatalf("the front door's create: %v", err)
	}
	if ri, ok, err := events.ParseRequestInfo(<-infos); err != nil || !ok || ri.Account != accA {
		t.Fatalf("the router saw %+v (ok %v, %v), want account %s", ri, ok, err, accA)
	}

	// The API keys: read (as e2bapi.OpenKVKeys and Lookup do), not written.
	ajs, _ := jetstream.New(env.Connect(t, env.Creds(auth.RoleAdmin)))
	akv, err := ajs.KeyValue(ctx, bus.BucketAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := akv.Put(ctx, "k1", []byte(`{"tenant":"`+accA+`"}`)); err != nil {
		t.Fatal(err)
	}
	ejs, _ := jetstream.New(e2b)
	kv, err := ejs.KeyValue(ctx, bus.BucketAPIKeys)
	if err != nil {
		t.Fatalf("the front door opens %s: %v", bus.BucketAPIKeys, err)
	}
	if e, err := kv.Get(ctx, "k1"); err != nil || len(e.Value()) == 0 {
		t.Fatalf("the front door reads a key: %v", err)
	}

	// Tenants' live and replay output reach it (live: SBX_OUT's republish,
	// here admin; replay: the router).
	admin := env.Connect(t, env.Creds(auth.RoleAdmin))
	for _, subject := range []string{"sbx.live." + accA + ".sb1.p1.stdout", "sbx.replay." + accA + ".n1"} {
		s, err := e2b.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := e2b.Flush(); err != nil {
			t.Fatal(err)
		}
		pub := admin
		if subject[:10] == "sbx.replay" {
			pub = router
		}
		if err := pub.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("the front door on %s: %v", subject, err)
		}
		_ = s.Unsubscribe()
	}
	if err := e2b.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, err := range Errors(e2b) {
		t.Errorf("the front door's job: %v", err)
	}

	for _, subject := range []string{
		"sbx.cmd.fake.pool.create",
		"sbx.cmd.fake.node.w1.exec",
		"sbx.ops.fake.sb1.closed",
		"sbx.out._.sb1.p1.stdout",
		"sbx.live." + accA + ".sb1.p1.stdout",
		"sbx.tun.w1.c1.open",
		"_SBX.router.r1.7",
		"$KV." + events.BucketRegistry + ".sb1",
		"$KV." + bus.BucketAPIKeys + ".k2",
		"$KV." + events.BucketTenants + "." + accA,
		"$JS.API.STREAM.INFO.KV_" + events.BucketRegistry,
		"$JS.API.DIRECT.GET.KV_" + events.BucketRegistry + ".$KV." + events.BucketRegistry + ".sb1",
		"$JS.API.CONSUMER.CREATE.KV_" + bus.BucketAPIKeys,
		"$JS.API.CONSUMER.CREATE." + events.StreamCommands + ".c1.sbx.cmd.>",
		"$JS.API.CONSUMER.MSG.NEXT." + events.StreamCommands + "." + events.PoolConsumer("fake"),
		"$JS.API.CONSUMER.CREATE." + events.StreamOutput,
		"$JS.API.STREAM.INFO." + events.StreamOutput,
		"$JS.API.STREAM.MSG.GET." + events.StreamOps,
		"$JS.API.STREAM.PURGE.KV_" + bus.BucketAPIKeys,
		"$O." + events.BucketFiles + ".C.x",
	} {
		t.Run("pub "+subject, func(t *testing.T) {
			nc := env.Connect(t, env.Creds(auth.RoleE2B))
			if err := nc.Publish(subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if !WaitDenied(nc, subject, denyWait) {
				t.Fatalf("the front door publishing %s was not denied (errors: %v)", subject, Errors(nc))
			}
		})
	}
	for _, subject := range []string{events.SubjectCmdAll, events.SubjectOpsAll, events.SubjectOutAll, "sbx.tun.>",
		"$KV." + events.BucketRegistry + ".>", events.SubjectAPIPrefix + ".>", "_SBX.router.>"} {
		t.Run("sub "+subject, func(t *testing.T) {
			nc := env.Connect(t, env.Creds(auth.RoleE2B))
			if _, err := nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			if !WaitDenied(nc, subject, denyWait) {
				t.Fatalf("the front door subscribing to %s was not denied (errors: %v)", subject, Errors(nc))
			}
		})
	}
}
