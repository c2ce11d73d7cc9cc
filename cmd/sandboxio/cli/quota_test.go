package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestQuotaCommand: `sandboxio quota` shows the tenant, limits and usage as
// a table, and the reply as JSON with --json.
func TestQuotaCommand(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Listen: true})
	sb := env.Create(context.Background())
	defer env.Client.Kill(context.Background(), sb.SandboxID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quota := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := run(ctx, "sandboxio", append([]string{"--nats", env.URL, "--log-level", "error", "quota"}, args...), &out, &errb); code != 0 {
			t.Fatalf("quota %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	table := quota()
	for _, want := range []string{"TENANT  _ (not a tenant", "live sandboxes", "concurrent execs", "sum of lifetimes (s)"} {
		if !strings.Contains(table, want) {
			t.Fatalf("table has no %q:\n%s", want, table)
		}
	}
	var q events.QuotaReply
	if err := json.Unmarshal([]byte(quota("--json")), &q); err != nil {
		t.Fatal(err)
	}
	if q.Tenant != events.TenantOpen {
		t.Fatalf("quota --json: %+v", q)
	}
}

func TestPrintQuota(t *testing.T) {
	var b bytes.Buffer
	printQuota(&b, &events.QuotaReply{Tenant: "ACC", Name: "team-a",
		Limits: events.TenantLimits{MaxSandboxes: 50, MaxExecs: -1, MaxLifetimeS: 3600, MaxStorageBytes: 1 << 30, MaxOutputBytes: 1 << 30},
		Usage:  events.TenantUsage{Sandboxes: 2, Execs: 1, LifetimeS: 600, StorageBytes: 4096, OutputBytes: 70000}})
	want := "TENANT  ACC (team-a)\n\n" +
		"QUOTA                             USED       LIMIT\n" +
		"live sandboxes                       2          50\n" +
		"concurrent execs                     1   unlimited\n" +
		"sum of lifetimes (s)               600        3600\n" +
		"files stored (bytes)              4096  1073741824\n" +
		"output stored (bytes)            70000  1073741824\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestTenantCommandsOnDevAuth: on `sandboxio dev --auth`, a tenant's CLI
// (its creds file, no JetStream) sees its own tenant and usage in `quota`
// and streams a command's output with `exec` (live subjects and attach).
func TestTenantCommandsOnDevAuth(t *testing.T) {
	dev := startDev(t, "--auth", "--backends", "fake")
	url := dev.URL
	creds := filepath.Join(dev.DataDir, "auth", "creds", "tenants", "tenant-a.creds")
	dev.waitLive(t, "fake", "", "--creds", creds)

	r := cli(t, url, "--creds", creds, "create", "--class", "fake", "--timeout", "60")
	var created events.CreateReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil {
		t.Fatalf("create: %+v", r)
	}
	q := cli(t, url, "--creds", creds, "quota")
	if q.code != 0 || !strings.Contains(q.stdout, "(tenant-a)") || strings.Contains(q.stdout, "TENANT  _") {
		t.Fatalf("quota as tenant-a: %+v", q)
	}
	if !strings.Contains(q.stdout, "live sandboxes                       1") {
		t.Fatalf("quota does not count the live sandbox:\n%s", q.stdout)
	}
	t.Logf("quota as tenant-a:\n%s", q.stdout)
	e := cli(t, url, "--creds", creds, "exec", created.SandboxID, "--", "interleave", "3")
	if e.code != 0 || e.stdout != "out 1\nout 2\nout 3\n" || withoutProcessLine(e.stderr) != "err 1\nerr 2\nerr 3\n" {
		t.Fatalf("streamed exec as tenant-a: %+v", e)
	}
	if k := cli(t, url, "--creds", creds, "kill", created.SandboxID); k.code != 0 {
		t.Fatalf("kill: %+v", k)
	}
}
