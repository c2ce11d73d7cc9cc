package client_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// stubRouter answers some API ops on a bare server, so that a test sees
// exactly what the client sends.
type stubRouter struct {
	t  *testing.T
	nc *nats.Conn
	mu sync.Mutex
	// requests holds the raw bodies per op.
	requests map[string][][]byte
}

func newStubRouter(t *testing.T) (*stubRouter, *nats.Conn) {
	t.Helper()
	srv := runServer(t, &server.Options{})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	return &stubRouter{t: t, nc: nc, requests: map[string][][]byte{}}, cnc
}

// answer serves op with reply (a value to encode, or an *events.Error).
func (s *stubRouter) answer(op string, reply any) {
	s.t.Helper()
	_, err := s.nc.Subscribe(events.APISubject(op), func(m *nats.Msg) {
		s.mu.Lock()
		s.requests[op] = append(s.requests[op], m.Data)
		s.mu.Unlock()
		out := nats.NewMsg(m.Reply)
		if e, ok := reply.(*events.Error); ok {
			out.Header.Set(events.HeaderServiceErrorCode, strings.TrimPrefix(string(e.Code), "SBX_E"))
			out.Header.Set(events.HeaderServiceError, e.Name+": "+e.Message)
			out.Data, _ = json.Marshal(map[string]any{"error": e})
		} else {
			out.Data, _ = json.Marshal(reply)
		}
		_ = m.RespondMsg(out)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stubRouter) got(op string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.requests[op]...)
}

func curveKey(t *testing.T) (nkeys.KeyPair, string) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// TestCreateSealsSecrets: secrets leave the client sealed to the xkey of
// the backend the create goes to (by dsn, class or the default class), or
// in clear for the router to seal when no key is known.
func TestCreateSealsSecrets(t *testing.T) {
	dflt, dfltPub := curveKey(t)
	gpu, gpuPub := curveKey(t)
	dock, dockPub := curveKey(t)
	stub, cnc := newStubRouter(t)
	stub.answer(events.OpBackends, events.BackendsReply{
		Backends: []events.BackendInfo{
			{Name: "fake", SealKey: dfltPub},
			{Name: "gpu", SealKey: gpuPub},
			// A router that does not aggregate the key: the leases have it.
			{Name: "docker", Workers: []events.WorkerLease{{Worker: "w1", SealKey: dockPub}, {Worker: "w2", SealKey: dockPub}}},
			{Name: "keyless"},
		},
		Classes: []events.ClassInfo{{Name: "std", Backend: "fake", Default: true}, {Name: "big", Backend: "gpu"}, {Name: "old", Backend: "keyless"}},
	})
	stub.answer(events.OpCreate, events.CreateReply{SandboxID: "s1"})
	cl, err := client.New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	const canary = "canary-7f3a9c"
	cases := []struct {
		name string
		req  events.CreateRequest
		key  nkeys.KeyPair // nil: sent in clear
		pub  string
	}{
		{"default class", events.CreateRequest{}, dflt, dfltPub},
		{"named class", events.CreateRequest{Class: "big"}, gpu, gpuPub},
		{"dsn scheme", events.CreateRequest{DSN: "docker://python:3.12"}, dock, dockPub},
		{"backend without a key", events.CreateRequest{Class: "old"}, nil, ""},
		{"unknown class", events.CreateRequest{Class: "nope"}, nil, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.TimeoutS = 60
			tc.req.Secrets = map[string]string{"API_KEY": canary, "OTHER": "x"}
			if _, err := cl.Create(context.Background(), tc.req); err != nil {
				t.Fatal(err)
			}
			raw := stub.got(events.OpCreate)[i]
			var sent events.CreateRequest
			if err := json.Unmarshal(raw, &sent); err != nil {
				t.Fatal(err)
			}
			if tc.key == nil {
				if sent.SealedSecrets != nil || sent.Secrets["API_KEY"] != canary {
					t.Fatalf("without a key the secrets go in clear for the router: %s", raw)
				}
				return
			}
			if strings.Contains(string(raw), canary) || sent.Secrets != nil {
				t.Fatalf("secret in clear in the create request: %s", raw)
			}
			box := sent.SealedSecrets
			if box == nil || box.Recipient != tc.pub || !strings.HasPrefix(box.Sender, "X") {
				t.Fatalf("sealed box: %+v", box)
			}
			data, err := base64.StdEncoding.DecodeString(box.Data)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := tc.key.Open(data, box.Sender)
			if err != nil {
				t.Fatalf("the backend's key does not open it: %v", err)
			}
			var got map[string]string
			if err := json.Unmarshal(plain, &got); err != nil || got["API_KEY"] != canary || got["OTHER"] != "x" {
				t.Fatalf("opened: %s (%v)", plain, err)
			}
		})
	}
	if n := len(stub.got(events.OpBackends)); n != 1 {
		t.Fatalf("backends asked %d times; the reply is cached", n)
	}
}

// TestTenantDetection: the quota op says who the caller is, once; a router
// without it means an open deployment.
func TestTenantDetection(t *testing.T) {
	const acc = "ABJHLOVMPA4CI6R5KLNGOB4GSLNIY7IOUPAJC4YFNDLQVIOBYQGUWVLA"
	cases := []struct {
		name    string
		quota   any // nil: no quota responder
		tenant  string
		api     bool
		backend bool // a backends responder
	}{
		{"a tenant", events.QuotaReply{Tenant: acc}, acc, true, true},
		{"open quota reply", events.QuotaReply{Tenant: events.TenantOpen}, events.TenantOpen, true, true}, // no JetStream here
		{"router without quota (unknown op)", events.Errorf(events.CodeUnknownOp, "no such op"), events.TenantOpen, true, true},
		{"router without quota (no responders)", nil, events.TenantOpen, true, true},
		{"no router yet", nil, events.TenantOpen, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stub, cnc := newStubRouter(t)
			if tc.quota != nil {
				stub.answer(events.OpQuota, tc.quota)
			}
			if tc.backend {
				stub.answer(events.OpBackends, events.BackendsReply{})
			}
			cl, err := client.New(cnc)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if got := cl.Tenant(); got != tc.tenant {
					t.Fatalf("Tenant() = %q, want %q", got, tc.tenant)
				}
			}
			if cl.UsesAPIPaths() != tc.api {
				t.Fatalf("api paths: %v", !tc.api)
			}
			want := 1
			if tc.quota == nil {
				want = 0
			}
			if n := len(stub.got(events.OpQuota)); n != want {
				t.Fatalf("quota asked %d times, want %d", n, want)
			}
			if !tc.backend {
				return
			}
			if tc.quota == nil && len(stub.got(events.OpBackends)) != 1 {
				t.Fatalf("an older router is recognised once: backends asked %d times", len(stub.got(events.OpBackends)))
			}
		})
	}
}

// TestQuota: Quota passes the router's answer through.
func TestQuota(t *testing.T) {
	stub, cnc := newStubRouter(t)
	want := events.QuotaReply{Tenant: "T1", Name: "team-a", Limits: events.TenantLimits{MaxSandboxes: 3, MaxExecs: -1},
		Usage: events.TenantUsage{Sandboxes: 2}}
	stub.answer(events.OpQuota, want)
	cl, err := client.New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := cl.Quota(ctx)
	if err != nil || *got != want {
		t.Fatalf("quota: %+v, %v", got, err)
	}
}
