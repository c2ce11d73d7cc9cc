package e2bapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// TestHostRouting: with a domain, <port>-<id>.<domain> hosts reach the
// sandbox plane without routing headers (older SDKs, presigned URLs); one
// routing header alone is E2B's proxy's 400; another port is 502. The
// second front door shares the first's token key and accepts its tokens.
func TestHostRouting(t *testing.T) {
	h := startHarness(t)
	resp, body := h.do(t, "POST", "/sandboxes", h.keys[authtest.TenantA], map[string]any{"templateID": "base", "timeout": 60})
	var sb map[string]any
	if resp.StatusCode != 201 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	id, tok := sb["sandboxID"].(string), sb["envdAccessToken"].(string)
	api, err := e2bapi.New(e2bapi.Config{Conn: h.env.Conn("e2b-frontdoor-2"), Domain: "sbx.test", TokenKey: []byte("test key"),
		Templates: map[string]e2bapi.Template{"base": {Class: "fake"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	for _, c := range []struct {
		name, host string
		hdr        map[string]string
		status     int
	}{
		{"host", "49983-" + id + ".sbx.test", map[string]string{"X-Access-Token": tok}, http.StatusNoContent},
		{"host with port", "49983-" + id + ".sbx.test:8080", map[string]string{"X-Access-Token": tok}, http.StatusNoContent},
		{"host, no token", "49983-" + id + ".sbx.test", nil, http.StatusBadGateway},
		{"one header", "gw", map[string]string{"E2b-Sandbox-Id": id}, http.StatusBadRequest},
		{"other port", "8000-" + id + ".sbx.test", nil, http.StatusBadGateway},
	} {
		req := httptest.NewRequest("GET", "http://"+c.host+"/health", nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.status)
		}
	}
	// Older SDKs send the routing headers on the control plane's connect.
	req := httptest.NewRequest("POST", "http://gw/sandboxes/"+id+"/connect", strings.NewReader(`{"timeout":60}`))
	req.Header.Set("X-API-Key", h.keys[authtest.TenantA])
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("connect with routing headers: %d %s", rec.Code, rec.Body)
	}
}

func TestLoadTemplates(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.yaml")
	os.WriteFile(p, []byte("base: {class: standard, cpu_count: 2}\ncode-interpreter-v1: {dsn: \"docker://sandboxio/python-data:3.11\"}\n"), 0o600)
	tpl, err := e2bapi.LoadTemplates(p)
	if err != nil || tpl["base"].Class != "standard" || tpl["base"].CPUCount != 2 || tpl["code-interpreter-v1"].DSN == "" {
		t.Fatalf("%+v, %v", tpl, err)
	}
	os.WriteFile(p, []byte("base: {klass: standard}\n"), 0o600)
	if _, err := e2bapi.LoadTemplates(p); err == nil {
		t.Fatal("an unknown key was accepted")
	}
}
