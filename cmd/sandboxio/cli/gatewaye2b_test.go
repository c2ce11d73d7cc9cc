package cli

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// TestGatewayE2BOnTheLayoutsUser: `sandboxio gateway --creds
// creds/gateway.creds --e2b-listen` runs the E2B API on the layout's e2b
// user (creds/e2b.creds beside the gateway's) without --e2b-creds: it reads
// the API keys (an unknown key is a 401, not an error), with the token key
// and templates from their files.
func TestGatewayE2BOnTheLayoutsUser(t *testing.T) {
	env := authtest.Start(t)
	dir := t.TempDir()
	keyFile, tplFile := filepath.Join(dir, "token.key"), filepath.Join(dir, "templates.yaml")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tplFile, []byte("base: {class: fake}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &sbxtest.Buffer{}, &sbxtest.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "sandboxio", []string{"--nats", env.URL, "--creds", env.Creds(auth.RoleGateway), "--log-level", "error",
			"gateway", "--listen", "127.0.0.1:0", "--e2b-listen", "127.0.0.1:0",
			"--e2b-token-key-file", keyFile, "--e2b-templates", tplFile}, out, errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the gateway did not stop within 30s")
		}
	})
	re := regexp.MustCompile(`E2B-compatible API on (http://\S+)`)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case code := <-done:
			done <- code // for the cleanup
			t.Fatalf("the gateway exited %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no E2B API within 20s: %s / %s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the gateway's start-up, with a deadline
	}
	key, _, err := e2bapi.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", base+"/sandboxes", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unknown key: %d, want 401", resp.StatusCode)
	}
	// A short token key is refused at start.
	if err := os.WriteFile(keyFile, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, env.URL, "--creds", env.Creds(auth.RoleGateway), "gateway", "--listen", "127.0.0.1:0",
		"--e2b-listen", "127.0.0.1:0", "--e2b-token-key-file", keyFile)
	if r.code == 0 || !strings.Contains(r.stderr, "--e2b-token-key-file") {
		t.Fatalf("a short token key: %+v", r)
	}
}
