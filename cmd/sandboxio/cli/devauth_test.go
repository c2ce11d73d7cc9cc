package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// TestDevAuthEndToEnd runs `sandboxio dev --auth` and drives it as a
// tenant would, with the creds it wrote; open access and foreign
// credentials are refused.
func TestDevAuthEndToEnd(t *testing.T) {
	dev := startDev(t, "--auth", "--backends", "fake")
	url, dataDir, devOut := dev.URL, dev.DataDir, dev.Out
	authDir := filepath.Join(dataDir, "auth")
	tenantA := filepath.Join(authDir, "creds", "tenants", "tenant-a.creds")
	tenantB := filepath.Join(authDir, "creds", "tenants", "tenant-b.creds")
	dev.waitLive(t, "fake", "", "--creds", tenantA)
	// The banner follows the services' start: live first, then printed.
	poll.Eventually(t, 10*time.Second, func() error {
		out := devOut.String()
		for _, want := range []string{"authentication on", tenantA, tenantB, filepath.Join(authDir, "creds", "router.creds")} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("dev did not print %q:\n%s", want, out)
			}
		}
		return nil
	})
	for _, f := range []string{tenantA, tenantB, filepath.Join(authDir, "keys", "seal.xk")} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}

	// Open access is refused, clearly and at once.
	start := time.Now()
	if r := cli(t, url, "backends"); r.code == 0 || !strings.Contains(r.stderr, "authorization violation") || !strings.Contains(r.stderr, "no credentials") {
		t.Fatalf("backends without creds: %+v", r)
	}
	if r := cli(t, url, "--creds", filepath.Join(dataDir, "nope.creds"), "backends"); r.code == 0 || !strings.Contains(r.stderr, "nope.creds") {
		t.Fatalf("backends with a missing creds file: %+v", r)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("refusals took %v", took)
	}

	// A tenant creates, execs and kills through the API.
	r := cli(t, url, "--creds", tenantA, "create", "--class", "fake", "--timeout", "60")
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.SandboxID == "" {
		t.Fatalf("create as tenant-a: %+v", r)
	}
	id := created.SandboxID
	if r := cli(t, url, "--creds", tenantA, "exec", "--buffered", id, "--", "echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("exec --buffered as tenant-a: %+v", r)
	}
	if r := cli(t, url, "--creds", tenantA, "exec", "--buffered", id, "--", "exit", "3"); r.code != 3 {
		t.Fatalf("exec --buffered exit 3 as tenant-a: %+v", r)
	}
	// Streamed output reaches the tenant through its own live subjects.
	if r := cli(t, url, "--creds", tenantA, "exec", id, "--", "echo", "streamed"); r.code != 0 || r.stdout != "streamed\n" {
		t.Fatalf("streamed exec as tenant-a: %+v", r)
	}
	if r := cli(t, url, "--creds", tenantA, "run", "--class", "fake", "--", "interleave", "2"); r.code != 0 || r.stdout != "out 1\nout 2\n" || !strings.Contains(r.stderr, "err 2") {
		t.Fatalf("run as tenant-a: %+v", r)
	}
	// Tenant B sees nothing of A's sandbox and can do nothing to it.
	refused := 0
	for _, args := range [][]string{{"exec", "--buffered", id, "--", "echo", "x"}, {"exec", id, "--", "echo", "x"}, {"kill", id}, {"get", id}} {
		r := cli(t, url, append([]string{"--creds", tenantB}, args...)...)
		if r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1402") {
			t.Fatalf("tenant-b %v on tenant-a's sandbox: %+v", args, r)
		}
		refused++
	}
	if r := cli(t, url, "--creds", tenantB, "ls"); r.code != 0 || strings.Contains(r.stdout, id) {
		t.Fatalf("tenant-b's ls shows tenant-a's sandbox: %+v", r)
	}
	if r := cli(t, url, "--creds", tenantA, "ls"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("tenant-a's ls misses its sandbox: %+v", r)
	}
	t.Logf("%d operations of tenant-b on tenant-a's sandbox refused with SBX_E1402", refused)
	if r := cli(t, url, "--creds", tenantA, "kill", id); r.code != 0 || strings.TrimSpace(r.stdout) != id+" gone" {
		t.Fatalf("kill as tenant-a: %+v", r)
	}
	// The environment works as well as the flag.
	t.Setenv("SBX_NATS_CREDS", tenantB)
	if r := cli(t, url, "backends"); r.code != 0 {
		t.Fatalf("backends with SBX_NATS_CREDS: %+v", r)
	}

	// The tenants' records are in sbx_tenants; tenant ls lists them.
	if r := cli(t, url, "tenant", "ls", "--dir", authDir); r.code != 0 || !strings.Contains(r.stdout, "tenant-a") || !strings.Contains(r.stdout, "tenant-b") {
		t.Fatalf("tenant ls: %+v", r)
	}
	// A tenant added to the running dev with --push can work at once.
	if r := cli(t, url, "tenant", "add", "team-c", "--dir", authDir, "--max-sandboxes", "2", "--push"); r.code != 0 || !strings.Contains(r.stdout, "pushed") {
		t.Fatalf("tenant add --push: %+v", r)
	}
	if r := cli(t, url, "--creds", filepath.Join(authDir, "creds", "tenants", "team-c.creds"), "backends"); r.code != 0 {
		t.Fatalf("backends as the pushed tenant: %+v", r)
	}
}

// TestDevLayoutKeepsItsCreds: a restarted `dev --auth` reuses the layout
// and tenants it wrote.
func TestDevLayoutKeepsItsCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	l1, t1, err := devLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	l2, t2, err := devLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if *l1 != *l2 || len(t1) != 2 || len(t2) != 2 || t1[0].Account != t2[0].Account || t1[1].Account != t2[1].Account {
		t.Fatalf("second start changed the layout: %+v %+v", l1, l2)
	}
}
