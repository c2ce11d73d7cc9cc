package e2bapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// TestFrontDoorOnTheE2BUser: on the account layout the front door runs on
// the layout's e2b user (auth.RoleE2B), not admin's: it reads a tenant's
// API key, creates through the router as that tenant, follows a streamed
// exec's output (live and replay) and attaches, with no permission
// violation on its connection.
func TestFrontDoorOnTheE2BUser(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Routing: fakeRouting, Auth: true})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var violations []error
	nc, err := nats.Connect(env.Auth.URL, nats.UserCredentials(env.Auth.Creds(auth.RoleE2B)), nats.Name("e2b-frontdoor"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ajs, err := jetstream.New(env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := ajs.KeyValue(ctx, e2bapi.BucketAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	acc := env.Auth.TenantAccount(authtest.TenantA)
	key, _, err := e2bapi.AddKey(ctx, kv, acc, authtest.TenantA)
	if err != nil {
		t.Fatal(err)
	}
	api, err := e2bapi.New(e2bapi.Config{Conn: nc, Templates: map[string]e2bapi.Template{"base": {Class: "fake"}},
		TokenKey: []byte("a test key of thirty-two bytes!!")})
	if err != nil {
		t.Fatalf("the front door on the e2b user: %v", err)
	}
	defer api.Close()
	srv := httptest.NewServer(api)
	defer srv.Close()
	h := &harness{env: env, api: api, srv: srv}
	resp, body := h.do(t, "POST", "/sandboxes", key, map[string]any{"templateID": "base", "timeout": 60})
	var sb map[string]any
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create through the front door: %d %s", resp.StatusCode, body)
	}
	id, _ := sb["sandboxID"].(string)
	got, err := env.Client.Get(ctx, id)
	if err != nil || got.Tenant != acc {
		t.Fatalf("the sandbox %s: tenant %q (%v), want %s", id, got.Tenant, err, acc)
	}

	// The client the front door uses for the tenant: a streamed exec and an
	// attach after its exit (the tenant's live and replay subjects).
	cl, err := client.New(nc, client.WithOnBehalfOf(acc))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"interleave", "5"}})
	if err != nil {
		t.Fatalf("stream as the tenant: %v", err)
	}
	out := readStdout(t, p)
	if strings.Count(out, "\n") != 5 {
		t.Fatalf("streamed stdout %q", out)
	}
	late, err := cl.Attach(ctx, id, p.ProcessID)
	if err != nil {
		t.Fatalf("attach as the tenant: %v", err)
	}
	if again := readStdout(t, late); again != out {
		t.Fatalf("attached stdout %q, want %q", again, out)
	}
	if _, err := cl.Kill(ctx, id); err != nil {
		t.Fatalf("kill as the tenant: %v", err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range violations {
		if errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("the front door's connection: %v", err)
		}
	}
}

func readStdout(t *testing.T, p *client.Process) string {
	t.Helper()
	var out strings.Builder
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Stream == events.Stdout {
			out.Write(c.Data)
		}
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	return out.String()
}
