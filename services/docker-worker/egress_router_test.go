//go:build integration

package dockerworker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestEgressAllowlistThroughRouter: the router places an allowlist on Docker
// (the lease advertises network_allowlist), the sandbox reaches only the
// listed name, and the registry record carries the policy in effect.
func TestEgressAllowlistThroughRouter(t *testing.T) {
	r := newEgressRig(t, Config{DefaultImage: baseImage})
	env := sbxtest.Start(t, sbxtest.Options{Backend: r.b, Routing: `default_class: standard
classes:
  standard: {backend: docker, image: "sandboxio/base:latest", require_isolation: container}
`})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reply, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120,
		Network: &events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"ALLOWED.test"}}})
	if err != nil {
		t.Fatalf("create allowlist through the router: %v", err)
	}
	if !slices.Contains(reply.Capabilities, events.CapNetworkAllowlist) {
		t.Errorf("capabilities %v", reply.Capabilities)
	}
	rec, err := env.Client.Get(ctx, reply.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Network == nil || rec.Network.Egress != events.EgressAllow || !slices.Equal(rec.Network.Allow, []string{"allowed.test"}) {
		t.Errorf("record network %+v", rec.Network)
	}
	for host, want := range map[string]string{"allowed.test": "hello allowed.test", "other.test": "403 Forbidden"} {
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: reply.SandboxID, Cmd: []string{"sh", "-c", httpGet(host, r.inet.ip.String())}})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
	if _, err := env.Client.Kill(ctx, reply.SandboxID); err != nil {
		t.Fatal(err)
	}
}
