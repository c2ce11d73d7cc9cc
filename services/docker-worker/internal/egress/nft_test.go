package egress

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFirewallRebuild writes a table for many sandboxes, checks what the
// kernel holds and how long one atomic rebuild takes, then removes it.
// Root only.
func TestFirewallRebuild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (nftables)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft to read the table back")
	}
	wid := fmt.Sprintf("fwtest-%d", time.Now().UnixNano()%1e9)
	f := newFirewall(TableName(wid), BridgePrefix(wid), Never)
	t.Cleanup(func() { _ = f.destroy() })
	pool := netip.MustParsePrefix("10.213.0.0/16")
	const n = 200
	var all []rules
	for i := range n {
		_, gw := subnetAt(pool, i)
		p := Policy{Mode: ModeAllow}
		if i%2 == 1 {
			p = Policy{Mode: ModeAllowlist, Names: []string{"a.test"}, CIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
		}
		key := Key(fmt.Sprintf("sb-%d", i))
		all = append(all, rules{key: key, bridge: BridgePrefix(wid) + key, gateway: gw, proxyPort: 40000, policy: p})
	}
	start := time.Now()
	if err := f.replace(all); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	start = time.Now()
	if err := f.remove(all[0].key); err != nil {
		t.Fatal(err)
	}
	one := time.Since(start)
	if err := f.verify(all[1].key); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("nft", "list", "table", "inet", TableName(wid)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s := string(out)
	if strings.Contains(s, "in_"+all[0].key) || !strings.Contains(s, "in_"+all[n-1].key) {
		t.Fatal("table does not hold exactly the sandboxes set")
	}
	if got := strings.Count(s, "redirect to :40000"); got != n/2 {
		t.Errorf("%d redirects, want %d", got, n/2)
	}
	if !strings.Contains(s, `iifname "`+BridgePrefix(wid)+`*"`) {
		t.Error("no fail-closed prefix rule")
	}
	rulesN := strings.Count(s, "\n") // about one line per rule
	t.Logf("%d sandboxes: ~%d lines of rules; full rebuild %s, rebuild after one removal %s", n, rulesN, full.Round(time.Millisecond), one.Round(time.Millisecond))
	// A ruleset flush by someone else: the next set writes everything again.
	if out, err := exec.Command("nft", "delete", "table", "inet", TableName(wid)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if err := f.set(all[0]); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{all[0].key, all[1].key, all[n-1].key} {
		if err := f.verify(k); err != nil {
			t.Errorf("after the table was removed under us: %v", err)
		}
	}
	if err := f.replace(nil); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("nft", "list", "table", "inet", TableName(wid)).CombinedOutput(); !strings.Contains(string(out), "No such file") {
		t.Errorf("table left with no sandbox: %s", out)
	}
}
