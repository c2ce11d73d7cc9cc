package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// noPortsBackend is the fake backend without the ports capability.
type noPortsBackend struct{ *fake.Backend }

func (b noPortsBackend) Info() worker.Info {
	i := b.Backend.Info()
	i.Capabilities = slices.DeleteFunc(slices.Clone(i.Capabilities), func(c events.Capability) bool { return c == events.CapPorts })
	return i
}

const (
	testGatewayURL    = "http://127.0.0.1:8480"
	testGatewayDomain = "sbx.localhost"
	reservedPort      = 9999
)

func startPorts(t *testing.T, withCap bool) *sbxtest.Env {
	t.Helper()
	var b worker.Backend = fake.New(fake.Config{})
	if !withCap {
		b = noPortsBackend{fake.New(fake.Config{})}
	}
	return sbxtest.Start(t, sbxtest.Options{Backend: b, Router: func(c *router.Config) {
		c.GatewayURL, c.GatewayDomain, c.ReservedPorts, c.PortLinkKey = testGatewayURL, testGatewayDomain, []int{reservedPort}, testLinkKey
	}})
}

// testLinkKey is the routers' port link key in these tests.
var testLinkKey = bytes.Repeat([]byte{7}, portauth.KeySize)

// registryPorts reads the sandbox's published ports from the registry itself.
func registryPorts(t *testing.T, env *sbxtest.Env, id string) []events.PortExposure {
	t.Helper()
	js, err := jetstream.New(env.Conn("registry-reader"))
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(c, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(c, id)
	if err != nil {
		t.Fatal(err)
	}
	var sb events.Sandbox
	if err := json.Unmarshal(e.Value(), &sb); err != nil {
		t.Fatal(err)
	}
	return sb.Ports
}

func hashOf(t *testing.T, ports []events.PortExposure, port int) string {
	t.Helper()
	for _, p := range ports {
		if p.Port == port {
			return p.TokenHash
		}
	}
	t.Fatalf("port %d is not in the record: %+v", port, ports)
	return ""
}

// TestPortsLifecycle: expose, list, token, rotate and unexpose on a running
// sandbox, and what the registry keeps of each.
func TestPortsLifecycle(t *testing.T) {
	env := startPorts(t, true)
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID

	var exp events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, &exp); e != nil {
		t.Fatalf("expose: %v", e)
	}
	wantURL := "http://8000-" + id + ".sbx.localhost:8480/"
	wantPath := testGatewayURL + "/sandboxes/" + id + "/ports/8000/"
	if exp.Access != events.PortPrivate || exp.URL != wantURL || exp.PathURL != wantPath || exp.ExposedAt.IsZero() {
		t.Fatalf("expose reply: %+v", exp)
	}
	if !strings.HasPrefix(exp.Token, portauth.TokenPrefix) {
		t.Fatalf("a private port's expose returned no token: %+v", exp)
	}
	h := hashOf(t, registryPorts(t, env, id), 8000)
	if h != portauth.Hash(exp.Token) {
		t.Fatalf("the registry keeps %q, not the token's hash", h)
	}

	// Exposing it again changes nothing and shows no token.
	var again events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000, Access: events.PortPrivate}, &again); e != nil {
		t.Fatalf("expose again: %v", e)
	}
	if again.Token != "" || !again.ExposedAt.Equal(exp.ExposedAt) || hashOf(t, registryPorts(t, env, id), 8000) != h {
		t.Fatalf("a repeated expose changed the port: %+v", again)
	}

	// A public port has no token.
	var pub events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 3000, Access: events.PortPublic}, &pub); e != nil {
		t.Fatalf("expose public: %v", e)
	}
	if pub.Token != "" || pub.Access != events.PortPublic || hashOf(t, registryPorts(t, env, id), 3000) != "" {
		t.Fatalf("public port: %+v", pub)
	}
	wantCode(t, "token of a public port", op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 3000}, nil), events.CodeInvalidValue)

	var list events.PortsListReply
	if e := op.do(events.OpPortsList, events.PortsListRequest{SandboxID: id}, &list); e != nil {
		t.Fatalf("list: %v", e)
	}
	if len(list.Ports) != 2 || list.Ports[0].Port != 3000 || list.Ports[1].Port != 8000 || list.Ports[1].Token != "" || list.Ports[1].URL != wantURL {
		t.Fatalf("list: %+v", list)
	}

	// A link, signed with the port's token hash.
	var link events.PortInfo
	if e := op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, LinkTTLS: 60}, &link); e != nil {
		t.Fatalf("token: %v", e)
	}
	v := linkValue(t, link.Link, wantURL)
	if link.Token != "" || link.LinkExpires == nil || time.Until(*link.LinkExpires) > time.Minute+time.Second {
		t.Fatalf("link reply: %+v", link)
	}
	if err := portauth.Verify(testLinkKey, v, h, portauth.PurposeLink, id, 8000, time.Now(), events.MaxPortLinkTTL); err != nil {
		t.Fatalf("the link does not verify: %v", err)
	}

	// A rotation: a new token and hash; the old link is void.
	var rot events.PortInfo
	if e := op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true}, &rot); e != nil {
		t.Fatalf("rotate: %v", e)
	}
	h2 := hashOf(t, registryPorts(t, env, id), 8000)
	if rot.Token == "" || rot.Token == exp.Token || h2 == h || h2 != portauth.Hash(rot.Token) {
		t.Fatalf("rotation: token %q, hash %q (was %q)", rot.Token, h2, h)
	}
	if err := portauth.Verify(testLinkKey, v, h2, portauth.PurposeLink, id, 8000, time.Now(), events.MaxPortLinkTTL); err == nil {
		t.Fatal("a link made before the rotation still verifies")
	}
	if err := portauth.Verify(testLinkKey, linkValue(t, rot.Link, wantURL), h2, portauth.PurposeLink, id, 8000, time.Now(), events.MaxPortLinkTTL); err != nil {
		t.Fatalf("the rotation's link does not verify: %v", err)
	}

	// Public, then private again: a new token.
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000, Access: events.PortPublic}, nil); e != nil {
		t.Fatal(e)
	}
	if hashOf(t, registryPorts(t, env, id), 8000) != "" {
		t.Fatal("a port made public keeps its token hash")
	}
	var priv events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, &priv); e != nil || priv.Token == "" {
		t.Fatalf("private again: %v %+v", e, priv)
	}

	var un events.PortsUnexposeReply
	if e := op.do(events.OpPortsUnexpose, events.PortsUnexposeRequest{SandboxID: id, Port: 8000}, &un); e != nil || !un.WasExposed {
		t.Fatalf("unexpose: %v %+v", e, un)
	}
	if e := op.do(events.OpPortsUnexpose, events.PortsUnexposeRequest{SandboxID: id, Port: 8000}, &un); e != nil || un.WasExposed {
		t.Fatalf("unexpose again: %v %+v", e, un)
	}
	wantCode(t, "token of an unpublished port", op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000}, nil), events.CodePortNotExposed)
	wantCode(t, "rotation of an unpublished port", op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true}, nil), events.CodePortNotExposed)
	if ports := registryPorts(t, env, id); len(ports) != 1 || ports[0].Port != 3000 {
		t.Fatalf("registry after unexpose: %+v", ports)
	}
	env.WaitOpened(t, "fake", id, events.OpPortsExpose, 4)
	env.WaitOpened(t, "fake", id, events.OpPortsUnexpose, 2)
	env.WaitOpened(t, "fake", id, events.OpPortsToken, 1)
}

func linkValue(t *testing.T, link, base string) string {
	t.Helper()
	if !strings.HasPrefix(link, base+"?"+portauth.LinkParam+"=") {
		t.Fatalf("link %q is not %s?%s=…", link, base, portauth.LinkParam)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get(portauth.LinkParam)
}

// TestPortsRefusals: every refusal of a ports op, each with its code, and
// none reaching the record.
func TestPortsRefusals(t *testing.T) {
	env := startPorts(t, true)
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	hash := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		op   string
		req  any
		want events.Code
	}{
		{"port 0", events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 0}, events.CodeInvalidValue},
		{"port 65536", events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 65536}, events.CodeInvalidValue},
		{"unknown access", events.OpPortsExpose, map[string]any{"sandbox_id": id, "port": 8000, "access": "open"}, events.CodeInvalidValue},
		{"a client's token hash", events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000, TokenHash: hash}, events.CodeInvalidValue},
		{"a client's token hash on rotate", events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true, TokenHash: hash}, events.CodeInvalidValue},
		{"reserved", events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: reservedPort}, events.CodePortReserved},
		{"link ttl over the max", events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, LinkTTLS: 86401}, events.CodeInvalidValue},
		{"unknown field", events.OpPortsExpose, map[string]any{"sandbox_id": id, "port": 8000, "public": true}, events.CodeUnknownField},
		{"bad id", events.OpPortsList, events.PortsListRequest{SandboxID: "a.b"}, events.CodeInvalidID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := operator(t, env)
			wantCode(t, tc.name, op.do(tc.op, tc.req, nil), tc.want)
		})
	}
	if ports := registryPorts(t, env, id); len(ports) != 0 {
		t.Fatalf("refused exposes reached the record: %+v", ports)
	}

	// At most MaxExposedPorts.
	for p := 1; p <= events.MaxExposedPorts; p++ {
		if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000 + p, Access: events.PortPublic}, nil); e != nil {
			t.Fatalf("expose %d: %v", p, e)
		}
	}
	e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 7000}, nil)
	wantCode(t, "one port too many", e, events.CodeTooManyPorts)
	if fmt.Sprint(e.Details["max"]) != fmt.Sprint(events.MaxExposedPorts) {
		t.Fatalf("details: %v", e.Details)
	}
	// An already published one may still change.
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8001}, nil); e != nil {
		t.Fatalf("re-expose at the bound: %v", e)
	}
	if n := len(registryPorts(t, env, id)); n != events.MaxExposedPorts {
		t.Fatalf("%d ports in the record", n)
	}

	// A sandbox that no longer runs.
	if e := op.do(events.OpKill, events.KillRequest{SandboxID: id}, nil); e != nil {
		t.Fatal(e)
	}
	for _, o := range []struct {
		op  string
		req any
	}{
		{events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}},
		{events.OpPortsUnexpose, events.PortsUnexposeRequest{SandboxID: id, Port: 8001}},
		{events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8001}},
	} {
		wantCode(t, o.op+" on a killed sandbox", op.do(o.op, o.req, nil), events.CodeSandboxGone)
	}
	var list events.PortsListReply
	if e := op.do(events.OpPortsList, events.PortsListRequest{SandboxID: id}, &list); e != nil || len(list.Ports) != 0 {
		t.Fatalf("a killed sandbox lists ports: %v %+v", e, list)
	}
}

// TestPortsNeedTheCapability: a backend without the ports capability
// refuses with SBX_E1105, at expose and at create.
func TestPortsNeedTheCapability(t *testing.T) {
	env := startPorts(t, false)
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	wantCode(t, "expose", op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, nil), events.CodeCapabilityNotSupp)
	wantCode(t, "create with ports", op.do(events.OpCreate, events.CreateRequest{TimeoutS: 300, Ports: []events.PortSpec{{Port: 8000}}}, nil),
		events.CodeCapabilityNotSupp)
}

// TestPortsForeignTenant: tenant A's ports ops on B's sandbox and on one
// that does not exist get the same refusal; B's port is untouched.
func TestPortsForeignTenant(t *testing.T) {
	env := startPorts(t, true)
	a, b := newTenant(t, env), newTenant(t, env)
	sbB := b.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	var exp events.PortInfo
	if e := b.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: sbB, Port: 8000}, &exp); e != nil {
		t.Fatal(e)
	}
	const missing = "no-such-sandbox-0"
	reqs := func(id string) map[string]any {
		return map[string]any{
			events.OpPortsExpose:   events.PortsExposeRequest{SandboxID: id, Port: 8000, Access: events.PortPublic},
			events.OpPortsList:     events.PortsListRequest{SandboxID: id},
			events.OpPortsUnexpose: events.PortsUnexposeRequest{SandboxID: id, Port: 8000},
			events.OpPortsToken:    events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true},
		}
	}
	for _, o := range []string{events.OpPortsExpose, events.OpPortsList, events.OpPortsUnexpose, events.OpPortsToken} {
		var msgs []string
		for _, id := range []string{sbB, missing} {
			e := a.do(o, reqs(id)[o], nil)
			wantCode(t, o+" by A on "+id, e, events.CodeForbidden)
			msgs = append(msgs, strings.ReplaceAll(e.Message, id, "ID"))
		}
		if msgs[0] != msgs[1] {
			t.Fatalf("%s: the refusals differ, revealing existence: %q vs %q", o, msgs[0], msgs[1])
		}
	}
	if h := hashOf(t, registryPorts(t, env, sbB), 8000); h != portauth.Hash(exp.Token) {
		t.Fatal("A's refused ops changed B's port")
	}
}

// TestTokenHashNeverShown: get and list show published ports without their
// token hashes.
func TestTokenHashNeverShown(t *testing.T) {
	env := startPorts(t, true)
	op := operator(t, env)
	tn := newTenant(t, env)
	for _, c := range []tenant{op, tn} {
		id := c.create(events.CreateRequest{TimeoutS: 300}).SandboxID
		var exp events.PortInfo
		if e := c.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, &exp); e != nil {
			t.Fatal(e)
		}
		h := portauth.Hash(exp.Token)
		var got json.RawMessage
		if e := c.do(events.OpGet, events.GetRequest{SandboxID: id}, &got); e != nil {
			t.Fatal(e)
		}
		var sb events.Sandbox
		_ = json.Unmarshal(got, &sb)
		if len(sb.Ports) != 1 || sb.Ports[0].Port != 8000 || bytes.Contains(got, []byte("token_hash")) || bytes.Contains(got, []byte(h)) {
			t.Fatalf("get shows %s", got)
		}
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			var list json.RawMessage
			if e := c.do(events.OpList, events.ListRequest{}, &list); e != nil {
				t.Fatal(e)
			}
			if bytes.Contains(list, []byte("token_hash")) || bytes.Contains(list, []byte(h)) {
				t.Fatalf("list shows %s", list)
			}
			return bytes.Contains(list, []byte(`"port":8000`))
		}, "list never showed the port")
	}
}

// TestCreateWithPorts: ports listed at create are published once the
// sandbox runs, their tokens in the create reply.
func TestCreateWithPorts(t *testing.T) {
	env := startPorts(t, true)
	op := operator(t, env)
	r := op.create(events.CreateRequest{TimeoutS: 300, Ports: []events.PortSpec{{Port: 8000}, {Port: 3000, Access: events.PortPublic}}})
	if len(r.Ports) != 2 {
		t.Fatalf("create reply ports: %+v", r.Ports)
	}
	got := map[int]events.PortInfo{}
	for _, p := range r.Ports {
		got[p.Port] = p
	}
	if got[8000].Token == "" || got[8000].Access != events.PortPrivate || got[3000].Token != "" || got[3000].Access != events.PortPublic {
		t.Fatalf("create reply ports: %+v", r.Ports)
	}
	if hashOf(t, registryPorts(t, env, r.SandboxID), 8000) != portauth.Hash(got[8000].Token) {
		t.Fatal("the registry does not keep the create's token hash")
	}
	// The same idempotent create twice: one sandbox, its token shown once.
	idem := events.CreateRequest{TimeoutS: 300, IdempotencyKey: "ports-1", Ports: []events.PortSpec{{Port: 8000}}}
	first, second := op.create(idem), op.create(idem)
	if first.SandboxID != second.SandboxID || len(first.Ports) != 1 || first.Ports[0].Token == "" ||
		len(second.Ports) != 1 || second.Ports[0].Token != "" || second.Ports[0].Port != 8000 {
		t.Fatalf("idempotent create with ports: %+v then %+v", first, second)
	}
	wantCode(t, "create with a reserved port", op.do(events.OpCreate,
		events.CreateRequest{TimeoutS: 300, Ports: []events.PortSpec{{Port: reservedPort}}}, nil), events.CodePortReserved)
	wantCode(t, "create with a port twice", op.do(events.OpCreate,
		events.CreateRequest{TimeoutS: 300, Ports: []events.PortSpec{{Port: 1}, {Port: 1}}}, nil), events.CodeInvalidValue)
	many := make([]events.PortSpec, events.MaxExposedPorts+1)
	for i := range many {
		many[i].Port = 2000 + i
	}
	wantCode(t, "create with too many ports", op.do(events.OpCreate, events.CreateRequest{TimeoutS: 300, Ports: many}, nil), events.CodeTooManyPorts)
}

// TestPortsConcurrent: exposes sent at once through two routers, beside
// set_timeouts of the same sandbox, all land in the record or are refused
// at the bound; no write loses another.
func TestPortsConcurrent(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Routers: 2})
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	const n = events.MaxExposedPorts + 4
	errs := make(chan *events.Error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 10000 + i}, nil)
		}()
		go func() {
			defer wg.Done()
			if e := op.do(events.OpSetTimeout, events.SetTimeoutRequest{SandboxID: id, TimeoutS: 600 + i}, nil); e != nil {
				t.Errorf("set_timeout beside the exposes: %v", e)
			}
		}()
	}
	wg.Wait()
	close(errs)
	ok, refused := 0, 0
	for e := range errs {
		switch {
		case e == nil:
			ok++
		case e.Code == events.CodeTooManyPorts:
			refused++
		default:
			t.Errorf("expose: %v", e)
		}
	}
	ports := registryPorts(t, env, id)
	if ok != events.MaxExposedPorts || refused != n-ok || len(ports) != ok {
		t.Fatalf("%d exposes succeeded, %d refused; the record has %d ports", ok, refused, len(ports))
	}
	var sb events.Sandbox
	if e := op.do(events.OpGet, events.GetRequest{SandboxID: id}, &sb); e != nil || time.Until(sb.Deadline) < 590*time.Second || len(sb.Ports) != ok {
		t.Fatalf("get after: %v, deadline in %v, %d ports", e, time.Until(sb.Deadline), len(sb.Ports))
	}
}

// TestPortsWhileCreating: a sandbox still being created publishes nothing
// yet (SBX_E1211, retryable).
func TestPortsWhileCreating(t *testing.T) {
	gate := make(chan struct{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{CreateGate: gate})})
	op := operator(t, env)
	done := make(chan struct{})
	go func() {
		defer close(done)
		op.create(events.CreateRequest{TimeoutS: 300, SandboxID: "held-1"})
	}()
	js, err := jetstream.New(env.Conn("registry-reader"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx(t), events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { _, err := kv.Get(ctx(t), "held-1"); return err == nil }, "the create never claimed its id")
	e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: "held-1", Port: 8000}, nil)
	wantCode(t, "expose while creating", e, events.CodeSandboxBusy)
	if !e.Retryable {
		t.Fatalf("%v is not retryable", e)
	}
	close(gate)
	<-done
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: "held-1", Port: 8000}, nil); e != nil {
		t.Fatalf("expose once running: %v", e)
	}
}

// TestPortsTenantsWithAccounts: with real NATS accounts (the server, not
// the client, says who calls), tenant B's ports ops on A's sandbox answer
// exactly what they answer on a sandbox that does not exist, and change
// nothing; A's get shows its port without the token's hash.
func TestPortsTenantsWithAccounts(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Auth: true})
	a, b := env.TenantClient(authtest.TenantA), env.TenantClient(authtest.TenantB)
	sb, err := a.Create(ctx(t), events.CreateRequest{TimeoutS: 300, Ports: []events.PortSpec{{Port: 8000}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.Ports) != 1 || sb.Ports[0].Token == "" {
		t.Fatalf("A's create with a port: %+v", sb.Ports)
	}
	h := portauth.Hash(sb.Ports[0].Token)
	const missing = "no-such-sandbox-0"
	calls := map[string]func(id string) error{
		events.OpPortsExpose: func(id string) error { _, err := b.ExposePort(ctx(t), id, 8001, events.PortPublic); return err },
		events.OpPortsList:   func(id string) error { _, err := b.ListPorts(ctx(t), id); return err },
		events.OpPortsUnexpose: func(id string) error {
			_, err := b.UnexposePort(ctx(t), id, 8000)
			return err
		},
		events.OpPortsToken: func(id string) error {
			_, err := b.PortToken(ctx(t), events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true})
			return err
		},
	}
	for op, call := range calls {
		var msgs []string
		for _, id := range []string{sb.ID(), missing} {
			err := call(id)
			var e *events.Error
			if !errors.As(err, &e) || e.Code != events.CodeForbidden {
				t.Fatalf("%s by B on %s: %v, want %s", op, id, err, events.CodeForbidden)
			}
			msgs = append(msgs, strings.ReplaceAll(e.Message, id, "ID"))
		}
		if msgs[0] != msgs[1] {
			t.Fatalf("%s: the refusals differ, revealing existence: %q vs %q", op, msgs[0], msgs[1])
		}
	}
	got, err := a.Get(ctx(t), sb.ID())
	if err != nil || len(got.Ports) != 1 || got.Ports[0].TokenHash != "" {
		t.Fatalf("A's get: %v %+v", err, got)
	}
	if hashOf(t, registryPorts(t, env, sb.ID()), 8000) != h {
		t.Fatal("B's refused ops changed A's port")
	}
}
