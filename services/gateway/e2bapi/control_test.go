package e2bapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// requireKeys decodes body as a JSON object and checks the keys the SDK
// parsers pop without a default.
func requireKeys(t *testing.T, what string, body []byte, keys ...string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: body %q is not a JSON object: %v", what, body, err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s: required key %q missing in %s", what, k, body)
		}
	}
	return m
}

// checkError checks E2B's Error body: code (= status, an integer) and
// message, both required.
func checkError(t *testing.T, what string, resp *http.Response, body []byte, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d (%s)", what, resp.StatusCode, status, body)
	}
	m := requireKeys(t, what, body, "code", "message")
	if c, ok := m["code"].(float64); !ok || int(c) != status {
		t.Fatalf("%s: code %v, want the integer %d", what, m["code"], status)
	}
	if _, ok := m["message"].(string); !ok {
		t.Fatalf("%s: message %v is not a string", what, m["message"])
	}
}

var sandboxKeys = []string{"templateID", "sandboxID", "clientID", "envdVersion"}
var detailKeys = []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"}

// checkDetail checks a SandboxDetail/ListedSandbox as the Python parser
// does: required keys, ISO times, state in the enum.
func checkDetail(t *testing.T, what string, m map[string]any) {
	t.Helper()
	for _, k := range detailKeys {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s: required key %q missing in %v", what, k, m)
		}
	}
	for _, k := range []string{"startedAt", "endAt"} {
		s, _ := m[k].(string)
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatalf("%s: %s %q is not ISO 8601: %v", what, k, s, err)
		}
	}
	if st := m["state"]; st != "running" && st != "paused" {
		t.Fatalf("%s: state %v not in the enum", what, st)
	}
}

// TestControlPlane walks the SDK's control-plane calls with their exact
// requests and parses every reply as strictly as the SDK parsers.
func TestControlPlane(t *testing.T) {
	h := startHarness(t)
	ka := h.keys[authtest.TenantA]
	create := map[string]any{"templateID": "base", "timeout": 300, "metadata": map[string]string{"user": "abc", "run": "1"},
		"envVars": map[string]string{"FOO": "bar"}, "secure": true, "allow_internet_access": false, "autoPause": false}
	var ids []string
	for i, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes"} {
		resp, body := h.do(t, "POST", path, ka, create)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", path, resp.StatusCode, body)
		}
		m := requireKeys(t, "create", body, sandboxKeys...)
		if m["clientID"] != "6532622b" || m["templateID"] != "base" || m["envdAccessToken"] == "" || m["envdAccessToken"] == nil {
			t.Fatalf("create reply %s", body)
		}
		if v, _ := m["envdVersion"].(string); v < "0.4.0" {
			t.Fatalf("envdVersion %q below 0.4.0", v)
		}
		ids = append(ids, m["sandboxID"].(string))
		if i == 0 {
			create["metadata"] = map[string]string{"user": "abc", "run": "2"}
		}
	}

	resp, body := h.do(t, "GET", "/sandboxes/"+ids[0], ka, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get: %d %s", resp.StatusCode, body)
	}
	d := requireKeys(t, "get", body)
	checkDetail(t, "get", d)
	if md, _ := d["metadata"].(map[string]any); md["user"] != "abc" || len(md) != 2 {
		t.Fatalf("get metadata %v", d["metadata"])
	}

	// The JS SDK's double-encoded metadata filter, paged one by one.
	filter := url.Values{"metadata": {"user=abc&run=2"}, "limit": {"1"}}.Encode()
	seen := map[string]bool{}
	next := ""
	for page := 0; page < 5; page++ {
		q := filter
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		resp, body = h.do(t, "GET", "/v2/sandboxes?"+q, ka, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d %s", resp.StatusCode, body)
		}
		var items []map[string]any
		if err := json.Unmarshal(body, &items); err != nil {
			t.Fatalf("list body %s: %v", body, err)
		}
		for _, it := range items {
			checkDetail(t, "list", it)
			seen[it["sandboxID"].(string)] = true
		}
		next = resp.Header.Get("X-Next-Token")
		if next == "" {
			break
		}
	}
	if len(seen) != 2 || !seen[ids[1]] || !seen[ids[2]] {
		t.Fatalf("metadata run=2 listed %v, want %v", seen, ids[1:])
	}

	for q, want := range map[string]int{"state=paused": 0, "state=running,paused": 3, "state=paused&state=running": 3, "state=running": 3} {
		resp, body := h.do(t, "GET", "/v2/sandboxes?"+q, ka, nil)
		var items []map[string]any
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &items) != nil || len(items) != want {
			t.Fatalf("list %s: %d, %d items, want %d (%s)", q, resp.StatusCode, len(items), want, body)
		}
	}
	for _, c := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", "/sandboxes/" + ids[0] + "/timeout", map[string]int{"timeout": 60}, http.StatusNoContent},
		{"POST", "/sandboxes/" + ids[0] + "/refreshes", map[string]int{"duration": 30}, http.StatusNoContent},
		{"POST", "/sandboxes/" + ids[0] + "/connect", map[string]int{"timeout": 120}, http.StatusOK},
		{"POST", "/v2/sandboxes/" + ids[0] + "/connect", map[string]int{"timeout": 120}, http.StatusOK},
		{"DELETE", "/sandboxes/" + ids[0], nil, http.StatusNoContent},
	} {
		resp, body := h.do(t, c.method, c.path, ka, c.body)
		if resp.StatusCode != c.status {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.status)
		}
		if c.status == http.StatusOK {
			requireKeys(t, c.path, body, sandboxKeys...)
		}
		if c.status == http.StatusNoContent && len(body) != 0 {
			t.Fatalf("%s: 204 with a body %q", c.path, body)
		}
	}
	// Gone: every call answers 404 with code 404 in the body (the JS SDK's
	// kill() returns false on exactly that).
	for _, c := range [][2]string{{"DELETE", "/sandboxes/" + ids[0]}, {"GET", "/sandboxes/" + ids[0]}} {
		resp, body := h.do(t, c[0], c[1], ka, nil)
		checkError(t, c[0]+" of a killed sandbox", resp, body, http.StatusNotFound)
	}
}

// TestBadInput: each bad request gets E2B's status and Error body, and
// nothing reaches another tenant's sandbox.
func TestBadInput(t *testing.T) {
	h := startHarness(t)
	ka, kb := h.keys[authtest.TenantA], h.keys[authtest.TenantB]
	resp, body := h.do(t, "POST", "/sandboxes", ka, map[string]any{"templateID": "base", "timeout": 120, "allow_internet_access": false})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var sb map[string]any
	_ = json.Unmarshal(body, &sb)
	id := sb["sandboxID"].(string)
	unknownKey := "e2b_" + strings.Repeat("0", 40)
	cases := []struct {
		name, method, path, key string
		body                    any
		status                  int
	}{
		{"no key", "GET", "/sandboxes/" + id, "", nil, http.StatusUnauthorized},
		{"malformed key", "GET", "/sandboxes/" + id, "sk-123", nil, http.StatusUnauthorized},
		{"unknown key", "GET", "/sandboxes/" + id, unknownKey, nil, http.StatusUnauthorized},
		{"malformed JSON", "POST", "/sandboxes", ka, `{"templateID": "base",`, http.StatusBadRequest},
		{"wrong type", "POST", "/sandboxes", ka, `{"templateID": 7}`, http.StatusBadRequest},
		{"no body", "POST", "/sandboxes", ka, ``, http.StatusBadRequest},
		{"unknown template", "POST", "/sandboxes", ka, map[string]any{"templateID": "nope", "timeout": 10}, http.StatusBadRequest},
		{"zero timeout", "POST", "/sandboxes", ka, map[string]any{"templateID": "base", "timeout": 0}, http.StatusBadRequest},
		{"long timeout", "POST", "/sandboxes", ka, map[string]any{"templateID": "base", "timeout": 90000}, http.StatusBadRequest},
		{"auto pause", "POST", "/sandboxes", ka, map[string]any{"templateID": "base", "autoPause": true}, http.StatusBadRequest},
		{"unknown route", "GET", "/templates", ka, nil, http.StatusNotFound},
		{"unknown sandbox route", "POST", "/sandboxes/" + id + "/frobnicate", ka, map[string]int{}, http.StatusNotFound},
		{"pause without snapshots", "POST", "/sandboxes/" + id + "/pause", ka, map[string]bool{"memory": true}, http.StatusBadRequest},
		{"fork", "POST", "/sandboxes/" + id + "/fork", ka, map[string]int{"count": 1}, http.StatusNotImplemented},
		{"unknown sandbox", "GET", "/sandboxes/ixxxxxxxxxxxxxxxxxxxx", ka, nil, http.StatusNotFound},
		{"bad id", "GET", "/sandboxes/..%2f..", ka, nil, http.StatusNotFound},
		{"foreign get", "GET", "/sandboxes/" + id, kb, nil, http.StatusNotFound},
		{"foreign kill", "DELETE", "/sandboxes/" + id, kb, nil, http.StatusNotFound},
		{"foreign timeout", "POST", "/sandboxes/" + id + "/timeout", kb, map[string]int{"timeout": 1}, http.StatusNotFound},
		{"foreign connect", "POST", "/v2/sandboxes/" + id + "/connect", kb, map[string]int{"timeout": 1}, http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := h.do(t, c.method, c.path, c.key, c.body)
			checkError(t, c.name, resp, body, c.status)
		})
	}
	// Tenant B lists nothing of A's; A's sandbox is still there, its
	// deadline untouched by B's timeout.
	resp, body = h.do(t, "GET", "/v2/sandboxes", kb, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), id) {
		t.Fatalf("tenant B's list: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(t, "GET", "/sandboxes/"+id, ka, nil)
	d := requireKeys(t, "get", body, detailKeys...)
	end, _ := time.Parse(time.RFC3339Nano, d["endAt"].(string))
	if resp.StatusCode != http.StatusOK || time.Until(end) < 60*time.Second {
		t.Fatalf("A's sandbox after B's attempts: %d, ends in %v", resp.StatusCode, time.Until(end))
	}
}

// TestTenantQuota: the front door's creates count against the key's
// tenant's quota: past max_sandboxes the SDK gets 429 {code, message}
// (its RateLimitError), and another tenant is not affected.
func TestTenantQuota(t *testing.T) {
	h := startHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(h.env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.StoreRecord(ctx, js, events.TenantRecord{ID: "QUOTA_T", Name: "quota-t", Limits: events.TenantLimits{MaxSandboxes: 1}}, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, e2bapi.BucketAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := e2bapi.AddKey(ctx, kv, "QUOTA_T", "quota-t")
	if err != nil {
		t.Fatal(err)
	}
	create := map[string]any{"templateID": "base", "timeout": 60}
	// The router learns the record from its watch: the second create is
	// refused once it has.
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		resp, body := h.do(t, "POST", "/sandboxes", key, create)
		if resp.StatusCode == http.StatusTooManyRequests {
			checkError(t, "create past max_sandboxes", resp, body, http.StatusTooManyRequests)
			return true
		}
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		return false
	}, "no 429 past max_sandboxes 1")
	if resp, body := h.do(t, "POST", "/sandboxes", h.keys[authtest.TenantA], create); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another tenant's create: %d %s", resp.StatusCode, body)
	}
}
