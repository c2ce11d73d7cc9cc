package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// TestTenantKeyCommands: `tenant key add` prints a key once that the E2B
// API accepts as that tenant, `ls` shows its hint and never the key, and
// after `rm` the API refuses it.
func TestTenantKeyCommands(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Listen: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sbx := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, "sandboxio", append([]string{"--nats", env.URL, "--log-level", "error", "tenant", "key"}, args...), &out, &errb); code != 0 {
			t.Fatalf("tenant key %v: exit %d: %s", args, code, errb.String())
		}
		return out.String(), errb.String()
	}
	key, _ := sbx("add", "team-a", "--account", "TEAM_A")
	key = strings.TrimSpace(key)
	if !e2bapi.WellFormedKey(key) || len(key) != 44 {
		t.Fatalf("key %q", key)
	}
	ls, _ := sbx("ls")
	if strings.Contains(ls, key) || !strings.Contains(ls, key[:10]) || !strings.Contains(ls, "TEAM_A") {
		t.Fatalf("ls shows the key or not its hint:\n%s", ls)
	}
	api, err := e2bapi.New(e2bapi.Config{Conn: env.Conn("e2b")})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	srv := httptest.NewServer(api)
	defer srv.Close()
	list := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/v2/sandboxes", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := list(); code != http.StatusOK {
		t.Fatalf("the new key: %d", code)
	}
	var listed []e2bapi.StoredKey
	js, _ := sbx("ls", "--json")
	if err := json.Unmarshal([]byte(js), &listed); err != nil || len(listed) != 1 || listed[0].Tenant != "TEAM_A" {
		t.Fatalf("ls --json: %s", js)
	}
	sbx("rm", listed[0].Hint)
	sbxtest.Eventually(t, 10*time.Second, func() bool { return list() == http.StatusUnauthorized }, "the removed key still works")
}
