package e2bapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// harness is the front door on an httptest server in front of a sandboxio
// (sbxtest: the fake backend, or the account layout with SBX_TEST_AUTH=1),
// with one API key per tenant.
type harness struct {
	env  *sbxtest.Env
	api  *e2bapi.API
	srv  *httptest.Server
	keys map[string]string // tenant name -> API key
	acc  map[string]string // tenant name -> account
}

const fakeRouting = `default_class: fake
classes:
  fake: {backend: fake}
`

func startHarness(t *testing.T) *harness {
	t.Helper()
	env := sbxtest.Start(t, sbxtest.Options{Routing: fakeRouting})
	h := &harness{env: env, keys: map[string]string{}, acc: map[string]string{}}
	// The front door is a services-account user (admin's creds on the
	// account layout, an in-process connection otherwise).
	nc := env.Conn("e2b-frontdoor")
	js, err := jetstream.New(env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, e2bapi.BucketAPIKeys)
	if err != nil {
		t.Fatalf("bucket %s (declared by the bus): %v", e2bapi.BucketAPIKeys, err)
	}
	for _, name := range []string{authtest.TenantA, authtest.TenantB} {
		acc := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if env.Auth != nil {
			acc = env.Auth.TenantAccount(name)
		}
		key, _, err := e2bapi.AddKey(ctx, kv, acc, name)
		if err != nil {
			t.Fatal(err)
		}
		h.keys[name], h.acc[name] = key, acc
	}
	api, err := e2bapi.New(e2bapi.Config{Conn: nc, Templates: map[string]e2bapi.Template{
		"base": {Class: "fake"}, "code-interpreter-v1": {Class: "fake"}}, TokenKey: []byte("test key")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	h.api = api
	h.srv = httptest.NewServer(api)
	t.Cleanup(h.srv.Close)
	return h
}

// do sends one control-plane request as the SDKs do.
func (h *harness) do(t *testing.T, method, path, key string, body any) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("User-Agent", "e2b-python-sdk/2.63.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
