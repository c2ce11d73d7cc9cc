package cli

import (
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestDevAuthE2BAPI: `dev --auth --e2b-listen` serves the E2B API on the
// layout's e2b user: a tenant's key lists that tenant's sandboxes, an
// unknown key is a 401.
func TestDevAuthE2BAPI(t *testing.T) {
	dev := startDev(t, "--auth", "--backends", "fake", "--gateway", "127.0.0.1:0", "--e2b-listen", "127.0.0.1:0")
	re := regexp.MustCompile(`E2B-compatible API on (http://\S+)`)
	var base string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if m := re.FindStringSubmatch(dev.Out.String()); m != nil {
			base = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no E2B API within 30s: %s / %s", dev.Out.String(), dev.Err.String())
		}
		time.Sleep(20 * time.Millisecond) // polling dev's start-up, with a deadline
	}
	r := cli(t, dev.URL, "tenant", "key", "add", "tenant-a", "--dir", filepath.Join(dev.DataDir, "auth"))
	key := regexp.MustCompile(`e2b_[0-9a-f]{40}`).FindString(r.stdout)
	if r.code != 0 || key == "" {
		t.Fatalf("tenant key add: %+v", r)
	}
	status := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/sandboxes", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status(key); s != http.StatusOK {
		t.Fatalf("list with tenant-a's key: %d (%s)", s, dev.Err.String())
	}
	if s := status("e2b_" + "0123456789012345678901234567890123456789"); s != http.StatusUnauthorized {
		t.Fatalf("an unknown key: %d, want 401", s)
	}
}
