package cli

import (
	"bytes"
	"context"
	"encoding/json"
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
		Limits: events.TenantLimits{MaxSandboxes: 50, MaxExecs: -1, MaxLifetimeS: 3600},
		Usage:  events.TenantUsage{Sandboxes: 2, Execs: 1, LifetimeS: 600}})
	want := "TENANT  ACC (team-a)\n\n" +
		"QUOTA                             USED       LIMIT\n" +
		"live sandboxes                       2          50\n" +
		"concurrent execs                     1   unlimited\n" +
		"sum of lifetimes (s)               600        3600\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
