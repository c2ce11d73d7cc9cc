package authtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

const denyWait = 3 * time.Second

// TestServicesDoTheirJobs: the router serves the API that tenants import;
// the server stamps the caller's account on the request, whatever header
// the caller sent.
func TestServicesDoTheirJobs(t *testing.T) {
	env := Start(t)
	router := env.Connect(t, env.Creds(auth.RoleRouter))
	infos := make(chan string, 4)
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
	for _, name := range []string{TenantA, TenantB} {
		tn := env.Connect(t, env.TenantCreds(name))
		m := nats.NewMsg(events.APISubject(events.OpQuota))
		// A forged header: the server must overwrite it.
		m.Header.Set(events.HeaderRequestInfo, `{"acc":"`+env.TenantAccount(otherTenant(name))+`"}`)
		m.Data = []byte(`{}`)
		reply, err := tn.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: request through the import: %v", name, err)
		}
		if string(reply.Data) != `{"ok":true}` {
			t.Fatalf("%s: reply %q", name, reply.Data)
		}
		ri, ok, err := events.ParseRequestInfo(<-infos)
		if err != nil || !ok {
			t.Fatalf("%s: request info: ok=%v err=%v", name, ok, err)
		}
		if ri.Account != env.TenantAccount(name) {
			t.Fatalf("%s: request info names account %s, want %s (forged header kept?)", name, ri.Account, env.TenantAccount(name))
		}
		if ri.User != env.Tenant(name).User {
			t.Fatalf("%s: request info names user %q, want %s (Share)", name, ri.User, env.Tenant(name).User)
		}
		t.Logf("%s: router saw acc=%s user=%s despite a forged header", name, ri.Account, ri.User)
	}
	// Inside the services account there is no import, hence no header: the
	// router treats such callers as the operator (events.TenantOpen).
	admin := env.Connect(t, env.Creds(auth.RoleAdmin))
	if _, err := admin.Request(events.APISubject(events.OpQuota), []byte(`{}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if h := <-infos; h != "" {
		t.Fatalf("a services-account caller got request info %q", h)
	}
	// Every role connects.
	for _, role := range auth.Roles {
		env.Connect(t, env.Creds(role)).Close()
	}
	// The reply to a long exec is still delivered: the server keeps a
	// tenant's request answerable for longer than the longest lifetime
	// (its default is 2 minutes).
	svc, err := env.Server.LookupAccount(env.Layout.SVC)
	if err != nil {
		t.Fatal(err)
	}
	th, err := svc.ServiceExportResponseThreshold(events.SubjectAPIPrefix + ".>")
	if err != nil || th < time.Duration(events.MaxLifetimeSeconds)*time.Second {
		t.Fatalf("API response threshold %v (%v), want at least %ds", th, err, events.MaxLifetimeSeconds)
	}
	t.Logf("API response threshold %v", th)
}

func otherTenant(name string) string {
	if name == TenantA {
		return TenantB
	}
	return TenantA
}

// TestDeniedPublishes: what each party may not publish, each denied by
// the server.
func TestDeniedPublishes(t *testing.T) {
	env := Start(t)
	cases := []struct {
		who, creds, subject string
	}{
		{"tenant", env.TenantCreds(TenantA), "sbx.cmd.fake.pool.create"},
		{"tenant", env.TenantCreds(TenantA), "sbx.ops.fake.sb1.closed"},
		{"tenant", env.TenantCreds(TenantA), "sbx.out." + env.TenantAccount(TenantA) + ".sb1.p1.stdout"},
		{"tenant", env.TenantCreds(TenantA), "$KV.sbx_registry.sb1"},
		{"tenant", env.TenantCreds(TenantA), "$KV.sbx_tenants." + env.TenantAccount(TenantA)},
		{"tenant", env.TenantCreds(TenantA), "$O.sbx_files.C.x"},
		{"tenant", env.TenantCreds(TenantA), "$JS.API.STREAM.LIST"},
		{"tenant", env.TenantCreds(TenantA), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"tenant", env.TenantCreds(TenantA), "_SBX.router.x"},
		{"tenant", env.TenantCreds(TenantA), "_SBX.router.r1.7"},
		{"tenant", env.TenantCreds(TenantA), "sbx.live." + env.TenantAccount(TenantA) + ".sb1.p1.stdout"},
		{"worker", env.Creds(auth.RoleWorker), "sbx.cmd.fake.pool.create"},
		{"worker", env.Creds(auth.RoleWorker), "sbx.cmd.fake.node.w1.exec"},
		{"worker", env.Creds(auth.RoleWorker), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"router", env.Creds(auth.RoleRouter), "sbx.ops.fake.sb1.closed"},
		{"router", env.Creds(auth.RoleRouter), "sbx.out._.sb1.p1.stdout"},
		{"router", env.Creds(auth.RoleRouter), "_SBX.router.r1.7"},
		{"router", env.Creds(auth.RoleRouter), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"router", env.Creds(auth.RoleRouter), "$JS.API.STREAM.DELETE.SBX_OPS"},
		{"router", env.Creds(auth.RoleRouter), "$JS.API.STREAM.MSG.DELETE.SBX_OPS"},
		{"router", env.Creds(auth.RoleRouter), "$JS.API.STREAM.UPDATE.SBX_OPS"},
		{"auditor", env.Creds(auth.RoleAuditor), "sbx.ops.fake.sb1.closed"},
		{"auditor", env.Creds(auth.RoleAuditor), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"reaper", env.Creds(auth.RoleReaper), "sbx.cmd.fake.pool.create"},
		{"reaper", env.Creds(auth.RoleReaper), "sbx.cmd.fake.node.w1.exec"},
		{"reaper", env.Creds(auth.RoleReaper), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"gateway", env.Creds(auth.RoleGateway), "sbx.cmd.fake.pool.create"},
		{"gateway", env.Creds(auth.RoleGateway), "sbx.ops.fake.sb1.closed"},
		{"gateway", env.Creds(auth.RoleGateway), "$KV.sbx_registry.sb1"},
		{"gateway", env.Creds(auth.RoleGateway), "sbx.api.v1.create"},
		{"gateway", env.Creds(auth.RoleGateway), "$JS.API.STREAM.PURGE.SBX_OPS"},
		{"gateway", env.Creds(auth.RoleGateway), "$JS.API.STREAM.UPDATE.SBX_CMD"},
	}
	denied := 0
	for _, c := range cases {
		t.Run(c.who+" "+c.subject, func(t *testing.T) {
			nc := env.Connect(t, c.creds)
			if err := nc.Publish(c.subject, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if !WaitDenied(nc, c.subject, denyWait) {
				t.Fatalf("%s publishing %s was not denied (errors: %v)", c.who, c.subject, Errors(nc))
			}
			denied++
		})
	}
	t.Logf("%d of %d forbidden publishes denied by the server", denied, len(cases))

	// The purge itself does not happen: SBX_OPS keeps its messages when the
	// router asks (it gets no answer); admin may.
	router := env.Connect(t, env.Creds(auth.RoleRouter))
	if _, err := router.Request("$JS.API.STREAM.PURGE."+events.StreamOps, nil, 500*time.Millisecond); err == nil {
		t.Fatal("the router's purge of SBX_OPS was answered")
	}
	admin := env.Connect(t, env.Creds(auth.RoleAdmin))
	if _, err := admin.Request("$JS.API.STREAM.INFO."+events.StreamOps, nil, 5*time.Second); err != nil {
		t.Fatalf("admin stream info: %v", err)
	}
}

// TestAllowedPublishes: each role's own job is not denied.
func TestAllowedPublishes(t *testing.T) {
	env := Start(t)
	cases := []struct{ who, creds, subject string }{
		{"router", env.Creds(auth.RoleRouter), "sbx.cmd.fake.pool.create"},
		{"router", env.Creds(auth.RoleRouter), "sbx.replay." + env.TenantAccount(TenantA) + ".n1"},
		{"worker", env.Creds(auth.RoleWorker), "sbx.ops.fake.sb1.closed"},
		{"worker", env.Creds(auth.RoleWorker), "sbx.out._.sb1.p1.stdout"},
		{"worker", env.Creds(auth.RoleWorker), "sbx.progress._.sb1"},
		{"worker", env.Creds(auth.RoleWorker), "_SBX.router.r1.7"},
		{"reaper", env.Creds(auth.RoleReaper), "sbx.cmd.fake.node.w1.kill"},
		{"tenant", env.TenantCreds(TenantA), "sbx.api.v1.list"},
		{"tenant", env.TenantCreds(TenantA), "_INBOX.x"},
	}
	for _, c := range cases {
		nc := env.Connect(t, c.creds)
		if err := nc.Publish(c.subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// A denial comes back before the answer to a ping sent after it.
		if err := nc.FlushTimeout(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		for _, err := range Errors(nc) {
			t.Fatalf("%s publishing %s: %v", c.who, c.subject, err)
		}
	}
}

// TestTenantOutputIsolation: each tenant gets its own live, progress and
// replay subjects and nothing of the other's, and cannot subscribe to the
// other's.
func TestTenantOutputIsolation(t *testing.T) {
	env := Start(t)
	accA, accB := env.TenantAccount(TenantA), env.TenantAccount(TenantB)
	a := env.Connect(t, env.TenantCreds(TenantA), nats.PermissionErrOnSubscribe(true))
	b := env.Connect(t, env.TenantCreds(TenantB))

	// A's subscriptions to B's subjects (and to everything) are refused.
	refused := 0
	for _, subj := range []string{"sbx.live." + accB + ".>", "sbx.progress." + accB + ".>", "sbx.replay." + accB + ".>",
		"sbx.live.>", "sbx.live.*.>", "sbx.out.>", ">", "$JS.API.>"} {
		sub, err := a.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		if !WaitDenied(a, subj, denyWait) {
			t.Fatalf("tenant A subscribing to %s was not denied", subj)
		}
		_ = sub.Unsubscribe()
		refused++
	}
	t.Logf("%d subscriptions of tenant A to others' or all output refused", refused)

	var gotA, gotB, leakedToA, leakedToB atomic.Int64
	subsA := []string{"sbx.live." + accA + ".>", "sbx.progress." + accA + ".>", "sbx.replay." + accA + ".>"}
	subsB := []string{"sbx.live." + accB + ".>", "sbx.progress." + accB + ".>", "sbx.replay." + accB + ".>"}
	for i := range subsA {
		if _, err := a.Subscribe(subsA[i], func(m *nats.Msg) {
			if string(m.Data) != "A" {
				leakedToA.Add(1)
			}
			gotA.Add(1)
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Subscribe(subsB[i], func(m *nats.Msg) {
			if string(m.Data) != "B" {
				leakedToB.Add(1)
			}
			gotB.Add(1)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	// The worker publishes output to SBX_OUT (RePublish to sbx.live) and
	// progress; the router publishes replays.
	worker := env.Connect(t, env.Creds(auth.RoleWorker))
	router := env.Connect(t, env.Creds(auth.RoleRouter))
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		for _, x := range []struct{ acc, body string }{{accA, "A"}, {accB, "B"}} {
			sb := fmt.Sprintf("sb%d", i)
			m := nats.NewMsg(events.OutputSubject(x.acc, sb, "p1", events.Stdout))
			m.Data = []byte(x.body)
			if _, err := worker.RequestMsgWithContext(ctx, m); err != nil { // the stream's ack
				t.Fatalf("worker output publish: %v", err)
			}
			if err := worker.Publish(events.ProgressSubject(x.acc, sb), []byte(x.body)); err != nil {
				t.Fatal(err)
			}
			if err := router.Publish(events.ReplaySubject(x.acc, sb), []byte(x.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for gotA.Load() < 3*n || gotB.Load() < 3*n {
		if time.Now().After(deadline) {
			t.Fatalf("delivered A %d B %d, want %d each", gotA.Load(), gotB.Load(), 3*n)
		}
		time.Sleep(5 * time.Millisecond) // polling counters, with a deadline
	}
	// Anything that leaked would have arrived with the rest: flush both.
	_ = a.Flush()
	_ = b.Flush()
	if leakedToA.Load() != 0 || leakedToB.Load() != 0 {
		t.Fatalf("leaked: %d of B's to A, %d of A's to B", leakedToA.Load(), leakedToB.Load())
	}
	t.Logf("tenant A received %d of its own messages and %d of B's; tenant B %d and %d of A's",
		gotA.Load(), leakedToA.Load(), gotB.Load(), leakedToB.Load())
}

// TestRequestInfoShape: the header parses with events.ParseRequestInfo
// and carries the service account.
func TestRequestInfoShape(t *testing.T) {
	env := Start(t)
	router := env.Connect(t, env.Creds(auth.RoleRouter))
	got := make(chan string, 1)
	if _, err := router.Subscribe(events.APISubject(events.OpList), func(m *nats.Msg) {
		got <- m.Header.Get(events.HeaderRequestInfo)
		_ = m.Respond(nil)
	}); err != nil {
		t.Fatal(err)
	}
	_ = router.Flush()
	a := env.Connect(t, env.TenantCreds(TenantA))
	if _, err := a.Request(events.APISubject(events.OpList), []byte(`{}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	h := <-got
	if err := json.Unmarshal([]byte(h), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["acc"] != env.TenantAccount(TenantA) {
		t.Fatalf("request info %s", h)
	}
}

func TestIssueAndRevoke(t *testing.T) {
	env := Start(t)
	creds, user := env.IssueUser(t, TenantB, auth.UserOptions{Name: "agent-7"})
	nc := env.Connect(t, creds)
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	env.Revoke(t, TenantB, user)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a revoked user stayed connected")
	}
	if _, err := env.Dial(creds); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("revoked user: %v", err)
	}
	// The tenant's other user is unaffected.
	env.Connect(t, env.TenantCreds(TenantB)).Close()
	expired, _ := env.IssueUser(t, TenantA, auth.UserOptions{Name: "old", Expires: time.Now().Add(-time.Minute)})
	if _, err := env.Dial(expired); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("expired user: %v", err)
	}
}

// TestTenantRecords: Start and AddTenant store the records the router
// reads its quotas from; a tenant cannot read or write them.
func TestTenantRecords(t *testing.T) {
	env := Start(t)
	tc := env.AddTenant(t, "team-c", events.TenantLimits{MaxSandboxes: 2})
	js, err := jetstream.New(env.Connect(t, env.Creds(auth.RoleRouter)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, events.BucketTenants)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{env.TenantAccount(TenantA), env.TenantAccount(TenantB), tc.Account} {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatalf("record %s: %v", id, err)
		}
		var rec events.TenantRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.ID != id {
			t.Fatalf("record %s: %s %v", id, e.Value(), err)
		}
		if id == tc.Account && rec.Limits.MaxSandboxes != 2 {
			t.Fatalf("team-c limits %+v", rec.Limits)
		}
	}
	// The router reads but may not write them (the denied publish gets no
	// answer: bounded by a short context).
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := kv.Put(pctx, tc.Account, []byte(`{}`)); err == nil {
		t.Fatal("the router wrote a tenant record")
	}
}
