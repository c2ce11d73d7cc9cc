package router_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/router"
)

// These tests run an open deployment (one account, no service import), so
// nats-server does not overwrite a Nats-Request-Info header a client sets:
// the test stamps it itself, exactly as the server stamps it on a tenant's
// request crossing the services account's import. The end-to-end test with
// real NATS accounts (internal/authtest) proves the server's part.

// tenant is a client speaking the raw API as one tenant ("" = no header:
// an operator or an open deployment).
type tenant struct {
	t  *testing.T
	nc *nats.Conn
	id string
}

func newTenant(t *testing.T, env *sbxtest.Env) tenant {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return tenant{t: t, nc: env.Conn("tenant-" + pub[:8]), id: pub}
}

func operator(t *testing.T, env *sbxtest.Env) tenant {
	return tenant{t: t, nc: env.Conn("operator")}
}

// do sends one request and decodes the reply into out; a failed reply is
// returned as its *events.Error.
func (tn tenant) do(op string, req, out any) *events.Error {
	tn.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		tn.t.Fatal(err)
	}
	m := nats.NewMsg(events.APISubject(op))
	m.Data = body
	if tn.id != "" {
		m.Header.Set(events.HeaderRequestInfo, `{"acc":"`+tn.id+`","user":"UTEST"}`)
	}
	reply, err := tn.nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		tn.t.Fatalf("%s: %v", op, err)
	}
	if reply.Header.Get(events.HeaderServiceErrorCode) != "" {
		e := events.DecodeError(reply.Data)
		if e == nil {
			tn.t.Fatalf("%s: error reply without an error body: %q", op, reply.Data)
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(reply.Data, out); err != nil {
			tn.t.Fatalf("%s: decode %q: %v", op, reply.Data, err)
		}
	}
	return nil
}

func (tn tenant) create(req events.CreateRequest) *events.CreateReply {
	tn.t.Helper()
	var r events.CreateReply
	if e := tn.do(events.OpCreate, req, &r); e != nil {
		tn.t.Fatalf("create as %q: %v", tn.id, e)
	}
	return &r
}

func wantCode(t *testing.T, what string, e *events.Error, want events.Code) {
	t.Helper()
	if e == nil || e.Code != want {
		t.Fatalf("%s: got %v, want %s", what, e, want)
	}
}

// TestTenantIsolation: every op of tenant A on tenant B's sandbox, and on a
// sandbox that does not exist, is refused with the same SBX_E1402 and the
// same message; nothing reaches the backend; operators still reach it.
func TestTenantIsolation(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a, b, op := newTenant(t, env), newTenant(t, env), operator(t, env)
	sbB := b.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	const missing = "no-such-sandbox-0"
	requests := func(id, owner string) map[string]any {
		name := owner + "/" + id + "/f1"
		return map[string]any{
			events.OpGet:        events.GetRequest{SandboxID: id},
			events.OpExec:       events.ExecRequest{SandboxID: id, Cmd: []string{"echo", "hi"}},
			events.OpRunCode:    events.RunCodeRequest{SandboxID: id, Code: "1"},
			events.OpFilesWrite: events.FilesWriteRequest{SandboxID: id, Path: "/x", Data: "aGk="},
			events.OpFilesRead:  events.FilesReadRequest{SandboxID: id, Path: "/x"},
			events.OpFilesList:  events.FilesListRequest{SandboxID: id, Path: "/"},
			events.OpSignal:     events.SignalRequest{SandboxID: id, ProcessID: "p1", Signal: "TERM"},
			events.OpStdin:      events.StdinRequest{SandboxID: id, ProcessID: "p1", Data: "x"},
			events.OpSetTimeout: events.SetTimeoutRequest{SandboxID: id, TimeoutS: 600},
			events.OpKill:       events.KillRequest{SandboxID: id},
			events.OpAttach:     events.AttachRequest{SandboxID: id, ProcessID: "p1", Nonce: "n1"},
			events.OpFilesGet:   events.FilesGetRequest{SandboxID: id, Name: name},
			events.OpFilesPut:   events.FilesPutRequest{SandboxID: id, Name: name, Data: "aGk="},
		}
	}
	const N = 10
	refused := 0
	check := func(target string) {
		for _, o := range []string{events.OpGet, events.OpExec, events.OpRunCode, events.OpFilesWrite, events.OpFilesRead, events.OpFilesList,
			events.OpSignal, events.OpStdin, events.OpSetTimeout, events.OpKill, events.OpAttach, events.OpFilesGet, events.OpFilesPut} {
			t.Run(target+"/"+o, func(t *testing.T) {
				a := tenant{t: t, nc: a.nc, id: a.id}
				var messages []string
				for _, id := range []string{target, missing} {
					req := requests(id, b.id)[o]
					for i := 0; i < N; i++ {
						e := a.do(o, req, nil)
						wantCode(t, fmt.Sprintf("%s by A on %s (attempt %d)", o, id, i), e, events.CodeForbidden)
						refused++
						if i == 0 {
							messages = append(messages, strings.ReplaceAll(e.Message, id, "ID"))
						}
					}
				}
				if messages[0] != messages[1] {
					t.Fatalf("the refusals differ, revealing existence: %q vs %q", messages[0], messages[1])
				}
			})
		}
	}
	check(sbB)
	t.Logf("live sandbox: %d ops x %d attempts x 2 targets; %d refused with %s", 13, N, refused, events.CodeForbidden)
	for _, call := range []string{"Exec", "RunCode", "WriteFile", "ReadFile", "ListFiles", "Signal", "Kill", "SetTimeout"} {
		if n := len(env.Fake.CallsTo(call)); n != 0 {
			t.Fatalf("a refused op reached the backend: %d %s calls", n, call)
		}
	}
	// B and operators still reach the sandbox.
	var got events.Sandbox
	if e := b.do(events.OpGet, events.GetRequest{SandboxID: sbB}, &got); e != nil || got.State != events.StateRunning || got.Tenant != b.id || got.Owner != b.id {
		t.Fatalf("B's get of its own sandbox: %v %+v", e, got)
	}
	if e := op.do(events.OpGet, events.GetRequest{SandboxID: sbB}, &got); e != nil {
		t.Fatalf("operator's get: %v", e)
	}
	if e := op.do(events.OpGet, events.GetRequest{SandboxID: missing}, nil); e == nil || e.Code != events.CodeSandboxNotFound {
		t.Fatalf("operator's get of a missing sandbox: %v, want SandboxNotFound", e)
	}
	// An ended sandbox of B is as forbidden to A as a live one.
	if e := b.do(events.OpKill, events.KillRequest{SandboxID: sbB}, nil); e != nil {
		t.Fatalf("B's kill: %v", e)
	}
	before := refused
	check(sbB)
	t.Logf("ended sandbox: %d more refused", refused-before)
	t.Logf("N=%d attempts per op and target; %d requests of A on B's or no sandbox, all %s", N, refused, events.CodeForbidden)
}

// TestCreateIdentity: the server's word decides tenant and owner; a
// client-chosen id taken by another tenant is Forbidden, not Exists; a
// malformed or doubled Nats-Request-Info is Unauthorized.
func TestCreateIdentity(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a, b, op := newTenant(t, env), newTenant(t, env), operator(t, env)
	r := a.create(events.CreateRequest{TimeoutS: 60, Owner: "mallory", SandboxID: "chosen-1"})
	var sb events.Sandbox
	if e := a.do(events.OpGet, events.GetRequest{SandboxID: r.SandboxID}, &sb); e != nil {
		t.Fatal(e)
	}
	if sb.Tenant != a.id || sb.Owner != a.id {
		t.Fatalf("tenant %q owner %q, want both %q", sb.Tenant, sb.Owner, a.id)
	}
	wantCode(t, "B creates A's id", b.do(events.OpCreate, events.CreateRequest{TimeoutS: 60, SandboxID: "chosen-1"}, nil), events.CodeForbidden)
	wantCode(t, "B creates A's id, idempotently", b.do(events.OpCreate, events.CreateRequest{TimeoutS: 60, SandboxID: "chosen-1", IdempotencyKey: "k"}, nil), events.CodeForbidden)
	wantCode(t, "A creates its own id again, another spec", a.do(events.OpCreate, events.CreateRequest{TimeoutS: 61, SandboxID: "chosen-1"}, nil), events.CodeSandboxExists)
	// The same spec again is a retry (ADR 37): A gets its sandbox; B's
	// same request is still refused as forbidden above.
	if e := a.do(events.OpCreate, events.CreateRequest{TimeoutS: 60, Owner: "mallory", SandboxID: "chosen-1"}, nil); e != nil {
		t.Fatalf("A retries its own create: %v", e)
	}
	// An open caller keeps its owner; its sandbox's tenant is TenantOpen.
	ro := op.create(events.CreateRequest{TimeoutS: 60, Owner: "alice"})
	if e := op.do(events.OpGet, events.GetRequest{SandboxID: ro.SandboxID}, &sb); e != nil || sb.Owner != "alice" || sb.Tenant != events.TenantOpen {
		t.Fatalf("open create: %v owner %q tenant %q", e, sb.Owner, sb.Tenant)
	}
	// The same idempotency key of two tenants makes two sandboxes.
	ka := a.create(events.CreateRequest{TimeoutS: 60, IdempotencyKey: "same"})
	kb := b.create(events.CreateRequest{TimeoutS: 60, IdempotencyKey: "same"})
	if ka.SandboxID == kb.SandboxID {
		t.Fatalf("two tenants' equal idempotency keys shared sandbox %s", ka.SandboxID)
	}
	for _, tc := range []struct{ name, header string }{
		{"not json", "{"},
		{"no account", `{"user":"U1"}`},
		{"bad account", `{"acc":"a.b"}`},
		{"the open token as account", `{"acc":"_"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(events.APISubject(events.OpList))
			m.Data = []byte(`{}`)
			m.Header.Set(events.HeaderRequestInfo, tc.header)
			checkUnauthorized(t, op.nc, m)
		})
	}
	t.Run("two headers", func(t *testing.T) {
		m := nats.NewMsg(events.APISubject(events.OpList))
		m.Data = []byte(`{}`)
		m.Header[events.HeaderRequestInfo] = []string{`{"acc":"` + a.id + `"}`}
		m.Header[strings.ToLower(events.HeaderRequestInfo)] = []string{`{"acc":"` + b.id + `"}`}
		checkUnauthorized(t, op.nc, m)
	})
}

func checkUnauthorized(t *testing.T, nc *nats.Conn, m *nats.Msg) {
	t.Helper()
	reply, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := events.DecodeError(reply.Data)
	wantCode(t, "request with header "+strings.Join(m.Header.Values(events.HeaderRequestInfo), ","), e, events.CodeUnauthorized)
}

// TestListIsolation: list shows a tenant only its own sandboxes, whatever
// owner it filters on; an operator sees all.
func TestListIsolation(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a, b, op := newTenant(t, env), newTenant(t, env), operator(t, env)
	for i := 0; i < 2; i++ {
		a.create(events.CreateRequest{TimeoutS: 60})
	}
	b.create(events.CreateRequest{TimeoutS: 60, Owner: a.id})
	op.create(events.CreateRequest{TimeoutS: 60, Owner: a.id})
	for _, tc := range []struct {
		name string
		who  tenant
		req  events.ListRequest
		want int
	}{
		{"A", a, events.ListRequest{}, 2},
		{"A filtering on B", a, events.ListRequest{Owner: b.id}, 2},
		{"B", b, events.ListRequest{}, 1},
		{"B filtering on A", b, events.ListRequest{Owner: a.id}, 1},
		{"operator", op, events.ListRequest{}, 4},
		{"operator filtering on A", op, events.ListRequest{Owner: a.id}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l events.ListReply
			if e := tc.who.do(events.OpList, tc.req, &l); e != nil {
				t.Fatal(e)
			}
			if len(l.Sandboxes) != tc.want {
				t.Fatalf("%d sandboxes, want %d", len(l.Sandboxes), tc.want)
			}
			for _, sb := range l.Sandboxes {
				if tc.who.id != "" && sb.Tenant != tc.who.id {
					t.Fatalf("list of %s shows %s of tenant %s", tc.who.id, sb.SandboxID, sb.Tenant)
				}
			}
		})
	}
}

// TestTenantQuotas: the (N+1)-th sandbox is refused with SBX_E1403 and
// nothing is created; other tenants are unaffected; concurrent creates at
// the limit do not all pass; records in sbx_tenants override the default;
// the lifetime and exec quotas hold.
func TestTenantQuotas(t *testing.T) {
	const limit = 3
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.DefaultLimits = events.TenantLimits{MaxSandboxes: limit} }})
	a, b, op := newTenant(t, env), newTenant(t, env), operator(t, env)

	t.Run("sandboxes", func(t *testing.T) {
		for i := 0; i < limit; i++ {
			a.create(events.CreateRequest{TimeoutS: 60})
		}
		creates := len(env.Fake.CallsTo("Create"))
		e := a.do(events.OpCreate, events.CreateRequest{TimeoutS: 60}, nil)
		wantCode(t, "the (N+1)-th create", e, events.CodeQuotaExceeded)
		if !e.Retryable || e.Details["quota"] != "max_sandboxes" || e.Details["limit"] != float64(limit) || e.Details["usage"] != float64(limit) {
			t.Fatalf("refusal: %+v", e)
		}
		if n := len(env.Fake.CallsTo("Create")); n != creates {
			t.Fatalf("a refused create reached the backend")
		}
		t.Logf("tenant A: %d sandboxes created, the %d-th refused with %s", limit, limit+1, e.Code)
		b.create(events.CreateRequest{TimeoutS: 60}) // another tenant is unaffected
		op.create(events.CreateRequest{TimeoutS: 60})
		var q events.QuotaReply
		if e := a.do(events.OpQuota, events.QuotaRequest{}, &q); e != nil {
			t.Fatal(e)
		}
		if q.Tenant != a.id || q.Limits.MaxSandboxes != limit || q.Usage.Sandboxes != limit ||
			q.Limits.MaxExecs != events.DefaultTenantLimits.MaxExecs || q.Usage.LifetimeS != 3*60 {
			t.Fatalf("quota of A: %+v", q)
		}
		// A killed sandbox frees its place.
		var l events.ListReply
		_ = a.do(events.OpList, events.ListRequest{}, &l)
		if e := a.do(events.OpKill, events.KillRequest{SandboxID: l.Sandboxes[0].SandboxID}, nil); e != nil {
			t.Fatal(e)
		}
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			return a.do(events.OpCreate, events.CreateRequest{TimeoutS: 60}, nil) == nil
		}, "a killed sandbox never freed its place in the quota")
	})

	t.Run("concurrent creates at the limit", func(t *testing.T) {
		c := newTenant(t, env)
		for i := 0; i < limit-1; i++ { // N-1 in use: one place left
			c.create(events.CreateRequest{TimeoutS: 60})
		}
		const tries = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok, refused := 0, 0
		for i := 0; i < tries; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := tenant{t: t, nc: c.nc, id: c.id}.do(events.OpCreate, events.CreateRequest{TimeoutS: 60}, nil)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case e == nil:
					ok++
				case e.Code == events.CodeQuotaExceeded:
					refused++
				default:
					t.Errorf("create: %v", e)
				}
			}()
		}
		wg.Wait()
		if ok != 1 || refused != tries-1 {
			t.Fatalf("%d concurrent creates at %d of %d: %d passed, %d refused; want 1 and %d", tries, limit-1, limit, ok, refused, tries-1)
		}
		t.Logf("%d concurrent creates at N-1: 1 passed, %d refused", tries, refused)
	})

	t.Run("tenant record and lifetime", func(t *testing.T) {
		d := newTenant(t, env)
		kv := tenantsBucket(t, env)
		rec := events.TenantRecord{ID: d.id, Name: "team-d", Limits: events.TenantLimits{MaxSandboxes: 10, MaxLifetimeS: 100}, CreatedAt: time.Now()}
		v, _ := json.Marshal(rec)
		if _, err := kv.Put(ctx(t), d.id, v); err != nil {
			t.Fatal(err)
		}
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			var q events.QuotaReply
			return d.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Name == "team-d" && q.Limits.MaxLifetimeS == 100
		}, "the router never saw the tenant record")
		d.create(events.CreateRequest{TimeoutS: 60})
		e := d.do(events.OpCreate, events.CreateRequest{TimeoutS: 60}, nil)
		wantCode(t, "a create past the lifetime quota", e, events.CodeQuotaExceeded)
		if e.Details["quota"] != "max_lifetime_s" {
			t.Fatalf("refusal: %+v", e)
		}
		d.create(events.CreateRequest{TimeoutS: 40}) // exactly at the limit
		var l events.ListReply
		_ = d.do(events.OpList, events.ListRequest{}, &l)
		wantCode(t, "set_timeout past the lifetime quota", d.do(events.OpSetTimeout, events.SetTimeoutRequest{SandboxID: l.Sandboxes[0].SandboxID, TimeoutS: 600}, nil), events.CodeQuotaExceeded)
	})

	t.Run("execs", func(t *testing.T) {
		x := newTenant(t, env)
		kv := tenantsBucket(t, env)
		v, _ := json.Marshal(events.TenantRecord{ID: x.id, Name: "team-x", Limits: events.TenantLimits{MaxExecs: 1}})
		if _, err := kv.Put(ctx(t), x.id, v); err != nil {
			t.Fatal(err)
		}
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			var q events.QuotaReply
			return x.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Limits.MaxExecs == 1
		}, "the router never saw the tenant record")
		sb := x.create(events.CreateRequest{TimeoutS: 60}).SandboxID
		var started events.ExecStreamReply
		if e := x.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: []string{"sleep", "60000"}, Stream: true, ProcessID: "long"}, &started); e != nil {
			t.Fatal(e)
		}
		e := x.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: []string{"echo", "hi"}}, nil)
		wantCode(t, "a second exec while one streams", e, events.CodeQuotaExceeded)
		wantCode(t, "run_code while one streams", x.do(events.OpRunCode, events.RunCodeRequest{SandboxID: sb, Code: "1"}, nil), events.CodeQuotaExceeded)
		other := newTenant(t, env) // unaffected
		osb := other.create(events.CreateRequest{TimeoutS: 60}).SandboxID
		if e := other.do(events.OpExec, events.ExecRequest{SandboxID: osb, Cmd: []string{"echo", "hi"}}, nil); e != nil {
			t.Fatalf("another tenant's exec: %v", e)
		}
		if e := x.do(events.OpSignal, events.SignalRequest{SandboxID: sb, ProcessID: "long", Signal: "KILL"}, nil); e != nil {
			t.Fatal(e)
		}
		// The exit marker ends the count; non-streamed execs end at their reply.
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			return x.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: []string{"echo", "hi"}}, nil) == nil
		}, "the streamed exec's exit never freed the exec quota")
		for i := 0; i < 3; i++ {
			if e := x.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: []string{"echo", "hi"}}, nil); e != nil {
				t.Fatalf("sequential exec %d: %v", i, e)
			}
		}
	})
}

func tenantsBucket(t *testing.T, env *sbxtest.Env) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx(t), events.BucketTenants)
	if err != nil {
		t.Fatalf("the router did not create %s: %v", events.BucketTenants, err)
	}
	return kv
}

// TestResourceLimits: a create asking for more than the operator's limits
// is refused naming the field, and reaches no worker.
func TestResourceLimits(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.MaxResources = events.Resources{CPUs: 2} }})
	op := operator(t, env)
	for _, tc := range []struct {
		name  string
		res   events.Resources
		field string
	}{
		{"cpus over the configured limit", events.Resources{CPUs: 4}, "resources.cpus"},
		{"memory over the default", events.Resources{MemoryMB: 16 << 10}, "resources.memory_mb"},
		{"pids over the default", events.Resources{PIDs: 100000}, "resources.pids"},
		{"disk over the default", events.Resources{DiskMB: 1 << 20}, "resources.disk_mb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			e := op.do(events.OpCreate, events.CreateRequest{TimeoutS: 60, Resources: &res}, nil)
			wantCode(t, "create", e, events.CodeInvalidValue)
			if e.Details["field"] != tc.field {
				t.Fatalf("field %v, want %s", e.Details["field"], tc.field)
			}
		})
	}
	if n := len(env.Fake.CallsTo("Create")); n != 0 {
		t.Fatalf("%d refused creates reached the backend", n)
	}
	op.create(events.CreateRequest{TimeoutS: 60, Resources: &events.Resources{CPUs: 2, MemoryMB: 1024}})
}

// TestAttachReplay: attach replays every stored message of a process
// exactly once, in order, with its subject, then the end marker; a 10 MB
// replay arrives whole; an unknown process ends at once.
func TestAttachReplay(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a := newTenant(t, env)
	sb := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"many small chunks", []string{"drip", "300", "1"}},
		{"10 MB", []string{"write", strconv.Itoa(10 << 20), strconv.Itoa(64 << 10)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := events.NewID()
			exit, err := a.nc.SubscribeSync(events.LiveSubject(a.id, sb, pid, events.Exit))
			if err != nil {
				t.Fatal(err)
			}
			if e := a.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: tc.cmd, Stream: true, ProcessID: pid}, nil); e != nil {
				t.Fatal(e)
			}
			if _, err := exit.NextMsg(30 * time.Second); err != nil {
				t.Fatalf("no exit marker: %v", err)
			}
			start := time.Now()
			stored, msgs, end := attach(t, a, sb, pid)
			took := time.Since(start)
			if len(msgs) != stored || end != stored {
				t.Fatalf("stored %d, received %d, end marker says %d", stored, len(msgs), end)
			}
			seen := map[string]map[int]bool{events.Stdout: {}, events.Stderr: {}, events.Exit: {}}
			var bytes int
			for _, m := range msgs {
				_, s, p, stream, ok := events.ParseOutputSubject(m.Header.Get(events.HeaderReplaySubject))
				if !ok || s != sb || p != pid {
					t.Fatalf("replayed message of subject %q", m.Header.Get(events.HeaderReplaySubject))
				}
				seq, _ := strconv.Atoi(m.Header.Get(events.HeaderSeq))
				if stream != events.Exit {
					if seen[stream][seq] {
						t.Fatalf("%s seq %d replayed twice", stream, seq)
					}
					if seq != len(seen[stream])+1 {
						t.Fatalf("%s seq %d after %d: out of order or a gap", stream, seq, len(seen[stream]))
					}
					if stream == events.Stdout {
						bytes += len(m.Data)
					}
				}
				seen[stream][seq] = true
			}
			if len(seen[events.Exit]) != 1 {
				t.Fatalf("exit markers replayed: %d", len(seen[events.Exit]))
			}
			if tc.cmd[0] == "write" && bytes != 10<<20 {
				t.Fatalf("replayed %d stdout bytes, want %d", bytes, 10<<20)
			}
			t.Logf("%s: %d messages (%d stdout, %d stderr, %d stdout bytes) replayed in %s",
				tc.name, len(msgs), len(seen[events.Stdout]), len(seen[events.Stderr]), bytes, took.Round(time.Millisecond))
		})
	}
	t.Run("while the process runs", func(t *testing.T) {
		pid := events.NewID()
		if e := a.do(events.OpExec, events.ExecRequest{SandboxID: sb, Cmd: []string{"drip", "100000", "2"}, Stream: true, ProcessID: pid}, nil); e != nil {
			t.Fatal(e)
		}
		live, err := a.nc.SubscribeSync(events.LiveFilter(a.id, sb, pid))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ { // some output is stored
			if _, err := live.NextMsg(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		stored, msgs, end := attach(t, a, sb, pid)
		if stored == 0 || len(msgs) != stored || end != stored {
			t.Fatalf("stored %d, received %d, end marker says %d", stored, len(msgs), end)
		}
		for i, m := range msgs {
			if seq, _ := strconv.Atoi(m.Header.Get(events.HeaderSeq)); seq != i+1 {
				t.Fatalf("message %d has seq %d", i, seq)
			}
		}
		t.Logf("attached while running: %d stored messages replayed, then the end marker", stored)
		if e := a.do(events.OpSignal, events.SignalRequest{SandboxID: sb, ProcessID: pid, Signal: "KILL"}, nil); e != nil {
			t.Fatal(e)
		}
	})
	t.Run("unknown process", func(t *testing.T) {
		start := time.Now()
		stored, msgs, end := attach(t, a, sb, "never-ran")
		if stored != 0 || len(msgs) != 0 || end != 0 {
			t.Fatalf("unknown process: stored %d, %d messages, end %d", stored, len(msgs), end)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("the empty replay took %s", took)
		}
	})
}

// attach subscribes to a fresh replay subject, asks for the replay and
// collects it up to the end marker.
func attach(t *testing.T, tn tenant, sandbox, process string) (stored int, msgs []*nats.Msg, end int) {
	t.Helper()
	nonce := events.NewID()
	sub, err := tn.nc.SubscribeSync(events.ReplaySubject(tn.id, nonce))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	var r events.AttachReply
	if e := tn.do(events.OpAttach, events.AttachRequest{SandboxID: sandbox, ProcessID: process, Nonce: nonce}, &r); e != nil {
		t.Fatal(e)
	}
	if r.Replay != events.ReplaySubject(tn.id, nonce) {
		t.Fatalf("replay subject %q", r.Replay)
	}
	for {
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("replay: after %d of %d messages: %v", len(msgs), r.Stored, err)
		}
		if v := m.Header.Get(events.HeaderReplayEnd); v != "" {
			end, _ = strconv.Atoi(v)
			return r.Stored, msgs, end
		}
		msgs = append(msgs, m)
	}
}

// TestFilesPrefix: files.get and files.put serve a tenant only objects
// under its own prefix, read the part count from the object's metadata,
// and a files.write ref to another tenant's object is refused.
func TestFilesPrefix(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a, b, op := newTenant(t, env), newTenant(t, env), operator(t, env)
	sbA := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	sbB := b.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	own := events.FileObjectPrefix(a.id, sbA) + "f1"
	data := base64.StdEncoding.EncodeToString([]byte("hello parts"))
	var put events.FilesPutReply
	if e := a.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sbA, Name: own, Part: 1, Data: data}, &put); e != nil || put.Size != 11 {
		t.Fatalf("put own part: %v %+v", e, put)
	}
	var got events.FilesGetReply
	if e := a.do(events.OpFilesGet, events.FilesGetRequest{SandboxID: sbA, Name: own, Part: 1}, &got); e != nil || got.Data != data {
		t.Fatalf("get own part: %v %+v", e, got)
	}
	// A worker's multi-part file: the part count is in the metadata.
	js, err := jetstream.New(env.Conn("worker-files"))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx(t), events.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	ref := events.FileObjectPrefix(a.id, sbA) + "r1"
	if _, err := obs.Put(ctx(t), jetstream.ObjectMeta{Name: events.FilePartName(ref, 0), Metadata: map[string]string{"parts": "3"}}, strings.NewReader("p0")); err != nil {
		t.Fatal(err)
	}
	if e := a.do(events.OpFilesGet, events.FilesGetRequest{SandboxID: sbA, Name: ref}, &got); e != nil || got.Parts != 3 {
		t.Fatalf("get part 0 of a 3-part file: %v %+v", e, got)
	}
	bName := events.FileObjectPrefix(b.id, sbB) + "f1"
	if e := b.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sbB, Name: bName, Data: data}, nil); e != nil {
		t.Fatal(e)
	}
	for _, tc := range []struct {
		name string
		op   string
		req  any
	}{
		{"get another tenant's prefix on own sandbox", events.OpFilesGet, events.FilesGetRequest{SandboxID: sbA, Name: events.FileObjectPrefix(b.id, sbA) + "f1"}},
		{"put another tenant's prefix on own sandbox", events.OpFilesPut, events.FilesPutRequest{SandboxID: sbA, Name: events.FileObjectPrefix(b.id, sbA) + "f1", Data: data}},
		{"get the open prefix", events.OpFilesGet, events.FilesGetRequest{SandboxID: sbA, Name: events.FileObjectPrefix(events.TenantOpen, sbA) + "f1"}},
		{"get B's object", events.OpFilesGet, events.FilesGetRequest{SandboxID: sbB, Name: bName}},
		{"put B's object", events.OpFilesPut, events.FilesPutRequest{SandboxID: sbB, Name: bName, Data: data}},
		{"write from B's object", events.OpFilesWrite, events.FilesWriteRequest{SandboxID: sbA, Path: "/x", Ref: &events.FileRef{Bucket: events.BucketFiles, Name: bName}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.name, a.do(tc.op, tc.req, nil), events.CodeForbidden)
		})
	}
	// B's object is untouched; an operator reads any prefix.
	if e := op.do(events.OpFilesGet, events.FilesGetRequest{SandboxID: sbB, Name: bName}, &got); e != nil || got.Data != data {
		t.Fatalf("operator's get of B's object: %v %+v", e, got)
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, events.MaxInlineFileBytes+1))
	wantCode(t, "oversized part", a.do(events.OpFilesPut, events.FilesPutRequest{SandboxID: sbA, Name: own, Data: big}, nil), events.CodePayloadTooLarge)
}

// TestRouterSealsSecrets: clear secrets from a plain client are sealed to
// the backend's seal key before they leave the router; the canary is in
// clear in no message on any subject (a subscriber to ">" listens
// throughout) and in no log line; without a seal key nothing is sent.
func TestRouterSealsSecrets(t *testing.T) {
	xkp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := xkp.Seed()
	sealKey, _ := xkp.PublicKey()
	logs := &sbxtest.Buffer{}
	env := sbxtest.Start(t, sbxtest.Options{
		Logger:  slogText(logs),
		Routing: sbxtest.DefaultRouting + "  vault: {backend: vault}\n",
		Worker:  func(c *worker.Config) { c.SealSeed = seed },
	})
	spy := env.Conn("spy")
	var mu sync.Mutex
	var all []*nats.Msg
	sub, err := spy.Subscribe(">", func(m *nats.Msg) { mu.Lock(); all = append(all, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	// Leases that advertise the seal key (the real worker does too once it
	// opens sealed secrets) and a backend whose worker advertises none.
	heartbeat(t, env, events.WorkerLease{Backend: "fake", Worker: "sealer", Isolation: events.TierContainer, SealKey: sealKey})
	heartbeat(t, env, events.WorkerLease{Backend: "vault", Worker: "v1", Isolation: events.TierContainer})
	env.WaitForBackend("vault")
	a, op := newTenant(t, env), operator(t, env)
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		var br events.BackendsReply
		if op.do(events.OpBackends, events.BackendsRequest{}, &br) != nil {
			return false
		}
		for _, b := range br.Backends {
			if b.Name == "fake" && b.SealKey == sealKey {
				return true
			}
		}
		return false
	}, "backends never showed the seal key")

	const canary = "canary-7f3a9c1e-do-not-leak"
	a.create(events.CreateRequest{TimeoutS: 60, Secrets: map[string]string{"API_TOKEN": canary}})
	op.create(events.CreateRequest{TimeoutS: 60, Secrets: map[string]string{"API_TOKEN": canary}, IdempotencyKey: "with-secret"})
	op.create(events.CreateRequest{TimeoutS: 60, Secrets: map[string]string{"API_TOKEN": canary}, IdempotencyKey: "with-secret"})
	wantCode(t, "secrets to a backend without a seal key", op.do(events.OpCreate, events.CreateRequest{Class: "vault", TimeoutS: 60, Secrets: map[string]string{"API_TOKEN": canary}}, nil), events.CodeNoWorker)
	other, _ := nkeys.CreateCurveKeys()
	otherPub, _ := other.PublicKey()
	box, err := other.Seal([]byte(`{"API_TOKEN":"x"}`), otherPub)
	if err != nil {
		t.Fatal(err)
	}
	e := op.do(events.OpCreate, events.CreateRequest{TimeoutS: 60, SealedSecrets: &events.SealedBox{Recipient: otherPub, Sender: otherPub, Data: base64.StdEncoding.EncodeToString(box)}}, nil)
	wantCode(t, "secrets sealed to a key no worker has", e, events.CodeInvalidValue)

	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	sealed, leaks, requests := 0, 0, 0
	for _, m := range all {
		if m.Subject == events.APISubject(events.OpCreate) {
			requests++ // the plain client's own request: it chose to send clear secrets to the router
			continue
		}
		if strings.Contains(string(m.Data), canary) || strings.Contains(fmt.Sprint(m.Header), canary) {
			leaks++
			t.Errorf("the canary in clear on %s", m.Subject)
		}
		if strings.HasPrefix(m.Subject, "sbx.cmd.vault.") {
			t.Errorf("a refused create was sent: %s", m.Subject)
		}
		if m.Subject != events.CreateSubject("fake") {
			continue
		}
		var cmd events.CreateCommand
		if err := json.Unmarshal(m.Data, &cmd); err != nil {
			t.Fatal(err)
		}
		if len(cmd.Request.Secrets) != 0 || cmd.Request.SealedSecrets == nil || cmd.Request.SealedSecrets.Recipient != sealKey {
			continue
		}
		raw, _ := base64.StdEncoding.DecodeString(cmd.Request.SealedSecrets.Data)
		plain, err := xkp.Open(raw, cmd.Request.SealedSecrets.Sender)
		if err != nil || string(plain) != `{"API_TOKEN":"`+canary+`"}` {
			t.Fatalf("the sealed box does not open to the secrets: %v", err)
		}
		sealed++
	}
	if sealed < 2 {
		t.Fatalf("%d sealed create commands seen, want at least 2", sealed)
	}
	if strings.Contains(logs.String(), canary) {
		t.Fatal("the canary is in the log")
	}
	t.Logf("%d messages on '>' seen (%d of them the plain client's own create requests); %d sealed create commands; canary in clear in %d messages past the router and 0 log lines",
		len(all), requests, sealed, leaks)
}

// heartbeat keeps a lease alive in sbx_workers until the test ends.
func heartbeat(t *testing.T, env *sbxtest.Env, l events.WorkerLease) {
	t.Helper()
	js, err := jetstream.New(env.Conn("lease-" + l.Worker))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx(t), events.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	put := func() {
		l.HeartbeatAt = time.Now()
		v, _ := json.Marshal(l)
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = kv.Put(c, events.WorkerKey(l.Backend, l.Worker), v)
	}
	put()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				put()
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// TestReplyTokensUnguessable: the reply subjects of the router's commands
// carry nuids, not a counter.
func TestReplyTokensUnguessable(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	spy := env.Conn("spy")
	cmds, err := spy.SubscribeSync("sbx.cmd.*.>") // commands, without the ballast on sbx.cmd.ballast (ADR 22)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	sb := env.Create(ctx(t))
	const n = 10
	for i := 0; i < n-1; i++ {
		if _, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	var tokens []string
	for i := 0; i < n; i++ {
		m, err := cmds.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		to := m.Header.Get(events.HeaderCEReplyTo)
		tok := to[strings.LastIndexByte(to, '.')+1:]
		if len(tok) != 22 || seen[tok] {
			t.Fatalf("reply token %q: not a fresh nuid", tok)
		}
		seen[tok] = true
		tokens = append(tokens, tok)
	}
	for i := 1; i < len(tokens); i++ {
		a, errA := strconv.ParseUint(tokens[i-1], 36, 64)
		b, errB := strconv.ParseUint(tokens[i], 36, 64)
		if errA == nil && errB == nil && b == a+1 {
			t.Fatalf("reply tokens are sequential: %s, %s", tokens[i-1], tokens[i])
		}
	}
	t.Logf("%d reply tokens, all distinct 22-character nuids, e.g. %s", n, tokens[0])
}

func slogText(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestConcurrentExtendsWithinLifetimeQuota: set_timeouts sent at once on
// several sandboxes of a tenant are checked against each other, not each
// against the same usage: with room for one extension, one passes and the
// others get SBX_E1403, and the sum of lifetimes stays within the quota.
func TestConcurrentExtendsWithinLifetimeQuota(t *testing.T) {
	const limit, sandboxes = 400, 4
	env := sbxtest.Start(t, sbxtest.Options{})
	d := newTenant(t, env)
	rec := events.TenantRecord{ID: d.id, Name: "team-x", Limits: events.TenantLimits{MaxSandboxes: 10, MaxLifetimeS: limit}, CreatedAt: time.Now()}
	v, _ := json.Marshal(rec)
	if _, err := tenantsBucket(t, env).Put(ctx(t), d.id, v); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		var q events.QuotaReply
		return d.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Limits.MaxLifetimeS == limit
	}, "the router never saw the tenant record")
	var ids []string
	for i := 0; i < sandboxes; i++ { // 4 × 60 s: 160 s left, room for one +100 s
		ids = append(ids, d.create(events.CreateRequest{TimeoutS: 60}).SandboxID)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := d.do(events.OpSetTimeout, events.SetTimeoutRequest{SandboxID: id, TimeoutS: 160}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e == nil:
				ok++
			case e.Code == events.CodeQuotaExceeded:
				refused++
			default:
				t.Errorf("set_timeout: %v", e)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || refused != sandboxes-1 {
		t.Fatalf("%d concurrent set_timeouts with room for one: %d passed, %d refused", sandboxes, ok, refused)
	}
	var q events.QuotaReply
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		return d.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Usage.LifetimeS > 3*60+60
	}, "the extension never showed in the usage")
	if q.Usage.LifetimeS > limit {
		t.Fatalf("lifetime usage %d exceeds the quota %d", q.Usage.LifetimeS, limit)
	}
	t.Logf("%d concurrent set_timeouts: 1 passed, %d refused; lifetime %d of %d", sandboxes, refused, q.Usage.LifetimeS, limit)
}

// TestExecCountedPastAnExtendedDeadline: an exec with no timeout_ms runs
// until its sandbox's deadline, which set_timeout may move. The router
// keeps waiting for it (and counting it against max_execs) until the new
// deadline, instead of answering SBX_E1503 at the old one and forgetting
// an exec that still runs: else a tenant extends its sandbox and runs
// max_execs more at every old deadline.
func TestExecCountedPastAnExtendedDeadline(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.ReplyMargin = 500 * time.Millisecond }})
	d := newTenant(t, env)
	rec := events.TenantRecord{ID: d.id, Name: "team-e", Limits: events.TenantLimits{MaxExecs: 1}, CreatedAt: time.Now()}
	v, _ := json.Marshal(rec)
	if _, err := tenantsBucket(t, env).Put(ctx(t), d.id, v); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		var q events.QuotaReply
		return d.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Limits.MaxExecs == 1
	}, "the router never saw the tenant record")
	id := d.create(events.CreateRequest{TimeoutS: 2}).SandboxID
	done := make(chan *events.Error, 1)
	go func() {
		// Outlives the first deadline (2 s + the margin), ends well before the new one.
		done <- d.do(events.OpExec, events.ExecRequest{SandboxID: id, Cmd: []string{"sleep", "4000"}}, nil)
	}()
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		var q events.QuotaReply
		return d.do(events.OpQuota, events.QuotaRequest{}, &q) == nil && q.Usage.Execs == 1
	}, "the exec was never counted")
	if e := d.do(events.OpSetTimeout, events.SetTimeoutRequest{SandboxID: id, TimeoutS: 60}, nil); e != nil {
		t.Fatal(e)
	}
	select {
	case e := <-done:
		if e != nil {
			t.Fatalf("the exec in a sandbox whose deadline moved: %v", e)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer to the exec")
	}
}

// TestRouterSignsCommands: every command the router publishes (creates and
// node commands) carries a signature by Config.SigningSeed over its subject,
// ce-id and data, which workers with a trusted commanders list require.
func TestRouterSignsCommands(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	// The workers trust this key too (in the authenticated mode they trust
	// the layout's commanders only).
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.SigningSeed = seed },
		Worker: func(c *worker.Config) {
			if len(c.TrustedCommandSigners) > 0 {
				c.TrustedCommandSigners = append(c.TrustedCommandSigners, pub)
			}
		}})
	spy := env.Conn("spy")
	cmds, err := spy.SubscribeSync("sbx.cmd.*.>") // commands, without the ballast on sbx.cmd.ballast (ADR 22)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	sb := env.Create(ctx(t))
	if _, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Kill(ctx(t), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for !seen[events.CommandType(events.OpKill)] {
		m, err := cmds.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the commands (seen %v): %v", seen, err)
		}
		want := m.Header.Get(events.HeaderCEType)
		seen[want] = true
		signer, err := recsign.Verify(m.Subject, m.Header, m.Data)
		if err != nil || signer != pub {
			t.Fatalf("%s command on %s: signer %q, %v; want a valid signature by %s", want, m.Subject, signer, err, pub)
		}
		// Altered on the way, it no longer verifies.
		if _, err := recsign.Verify(m.Subject, m.Header, append([]byte(nil), append(m.Data, ' ')...)); !errors.Is(err, recsign.ErrInvalid) {
			t.Fatalf("%s command with altered data: %v, want ErrInvalid", want, err)
		}
	}
	for _, op := range []string{events.OpCreate, events.OpExec} {
		if !seen[events.CommandType(op)] {
			t.Fatalf("no %s command seen (%v)", op, seen)
		}
	}
	t.Logf("%d kinds of command, all signed by the router's key", len(seen))
	if _, err := router.New(router.Config{SigningSeed: []byte("SUNOTASEED")}, spy); err == nil {
		t.Fatal("router.New accepted a SigningSeed that is not a user seed")
	}
}

// TestRouterWithoutSeedSignsNothing: a router without a SigningSeed
// publishes its commands unsigned (ADR 17: a key made for one instance is
// one no worker could trust, and its signature cost every command).
func TestRouterWithoutSeedSignsNothing(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) { c.SigningSeed = nil }})
	if env.Auth != nil {
		t.Skip("the authenticated layout's workers run only signed commands")
	}
	spy := env.Conn("spy")
	cmds, err := spy.SubscribeSync("sbx.cmd.*.>") // commands, without the ballast on sbx.cmd.ballast (ADR 22)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	sb := env.Create(ctx(t))
	if _, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "x"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the create and the exec
		m, err := cmds.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recsign.Verify(m.Subject, m.Header, m.Data); !errors.Is(err, recsign.ErrUnsigned) {
			t.Fatalf("%s command: %v, want unsigned", m.Header.Get(events.HeaderCEType), err)
		}
	}
	if r, err := router.New(router.Config{}, spy); err != nil || r.SigningKey() != "" {
		t.Fatalf("router without a seed: key %q, %v", r.SigningKey(), err)
	}
}
