//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// metadataEntries are link-local and cloud metadata addresses a tenant may
// not list: AWS/GCP/OpenStack (169.254.169.254), AWS's IPv6 one, Alibaba,
// Azure's wire server, and link-local ranges.
var metadataEntries = []string{"169.254.169.254/32", "169.254.169.254", "169.254.0.0/16",
	"100.100.100.200", "168.63.129.16/32", "fe80::/10", "fd00:ec2::254"}

// TestEgressMetadataRefused: a tenant's allowlist naming a metadata or
// link-local address is refused at validation with its code, and nothing is
// created; an operator who allows them gets them listed.
func TestEgressMetadataRefused(t *testing.T) {
	t.Parallel()
	needEgressHost(t)
	wid := randID("test-")
	dropEgressTable(t, wid)
	b := newTestBackend(t, Config{WorkerID: wid})
	for _, entry := range metadataEntries {
		spec := newSpec(withNetwork(events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{entry}}))
		_, err := b.Create(context.Background(), spec)
		var e *events.Error
		if !errors.As(err, &e) || e.Code != events.CodeEgressCIDRForbidden {
			t.Errorf("allow [%s]: %v, want %s", entry, err, events.CodeEgressCIDRForbidden)
			if err == nil {
				_ = b.Kill(context.Background(), spec.SandboxID)
			}
		}
	}
	// The operator's setting: the ranges may be listed again.
	p, err := egress.Parse(events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"169.254.169.254/32"}},
		egress.Limits{}, egress.NeverRanges(true))
	if err != nil || len(p.CIDRs) != 1 {
		t.Fatalf("operator-allowed metadata: %+v %v", p, err)
	}
}

// TestEgressMetadataDropped: whatever passed validation, the host's rules
// for an allow sandbox drop every metadata address ahead of the accept
// (Azure's wire server is a public address, so only this rule stops it).
// The rules are read back from the kernel; no packet is sent.
func TestEgressMetadataDropped(t *testing.T) {
	t.Parallel()
	needEgressHost(t)
	wid := randID("test-")
	dropEgressTable(t, wid)
	b := newTestBackend(t, Config{WorkerID: wid})
	id, _ := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow})
	out, err := exec.Command("nft", "list", "chain", "inet", egress.TableName(wid), "fw_"+egress.Key(id)).CombinedOutput()
	if err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	chain := string(out)
	accept := strings.LastIndex(chain, "accept")
	for _, d := range []string{"169.254.0.0/16", "100.100.100.200", "168.63.129.16"} {
		i := strings.Index(chain, "ip daddr "+d+" counter")
		if i < 0 || i > accept || !strings.Contains(chain[i:i+80], "drop") {
			t.Errorf("no drop for %s ahead of the accept in\n%s", d, chain)
		}
	}
}
