package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
)

// zone serves A records from a map on 127.0.0.1.
func zone(t *testing.T, records map[string][]string) upstream {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		ips, ok := records[q.Question[0].Name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, ip := range ips {
			hdr := dns.RR_Header{Name: q.Question[0].Name, Class: dns.ClassINET, Ttl: 5}
			if a := net.ParseIP(ip); a.To4() != nil {
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.To4()})
			} else {
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a})
			}
		}
		_ = w.WriteMsg(m)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return upstream{servers: []string{pc.LocalAddr().String()}, timeout: time.Second}
}

func TestResolver(t *testing.T) {
	up := zone(t, map[string][]string{
		"ok.test.":     {"93.184.216.34"},
		"mixed.test.":  {"10.0.0.5", "93.184.216.35", "2001:db8::1"},
		"rebind.test.": {"10.0.0.5", "127.0.0.1"},
		"lan.test.":    {"192.168.1.9"},
		"other.test.":  {"93.184.216.36"},
	})
	allowlist := Policy{Mode: ModeAllowlist, Names: []string{"ok.test", "mixed.test", "rebind.test", "lan.test"},
		CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}
	cases := []struct {
		name  string
		p     Policy
		qname string
		qtype uint16
		rcode int
		ips   []string
	}{
		{"listed", allowlist, "ok.test.", dns.TypeA, dns.RcodeSuccess, []string{"93.184.216.34"}},
		{"listed, case", allowlist, "OK.Test.", dns.TypeA, dns.RcodeSuccess, []string{"93.184.216.34"}},
		{"private answers dropped", allowlist, "mixed.test.", dns.TypeA, dns.RcodeSuccess, []string{"93.184.216.35"}},
		{"rebinding refused", allowlist, "rebind.test.", dns.TypeA, dns.RcodeRefused, nil},
		{"private covered by a listed CIDR", allowlist, "lan.test.", dns.TypeA, dns.RcodeSuccess, []string{"192.168.1.9"}},
		{"not listed", allowlist, "other.test.", dns.TypeA, dns.RcodeNameError, nil},
		{"no AAAA", allowlist, "mixed.test.", dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"no HTTPS records (ECH)", allowlist, "ok.test.", dns.TypeHTTPS, dns.RcodeSuccess, nil},
		{"allow mode answers any name", Policy{Mode: ModeAllow}, "other.test.", dns.TypeA, dns.RcodeSuccess, []string{"93.184.216.36"}},
		{"allow mode refuses rebinding", Policy{Mode: ModeAllow}, "lan.test.", dns.TypeA, dns.RcodeRefused, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &resolver{policy: c.p, never: Never, up: up, stats: &Stats{}}
			q := new(dns.Msg)
			q.SetQuestion(c.qname, c.qtype)
			resp := r.answer(q)
			if resp.Rcode != c.rcode || resp.Id != q.Id {
				t.Fatalf("rcode %s id %d, want %s id %d", dns.RcodeToString[resp.Rcode], resp.Id, dns.RcodeToString[c.rcode], q.Id)
			}
			var ips []string
			for _, rr := range resp.Answer {
				switch v := rr.(type) {
				case *dns.A:
					ips = append(ips, v.A.String())
				case *dns.AAAA:
					ips = append(ips, v.AAAA.String())
				}
			}
			if !slices.Equal(ips, c.ips) {
				t.Fatalf("answers %v, want %v", ips, c.ips)
			}
		})
	}
}

func TestResolverRateLimited(t *testing.T) {
	up := zone(t, map[string][]string{"ok.test.": {"93.184.216.34"}})
	r := &resolver{policy: Policy{Mode: ModeAllow}, never: Never, up: up, stats: &Stats{}, limit: rate.NewLimiter(1, 2)}
	codes := map[int]int{}
	for range 5 {
		q := new(dns.Msg)
		q.SetQuestion("ok.test.", dns.TypeA)
		codes[r.answer(q).Rcode]++
	}
	if codes[dns.RcodeSuccess] != 2 || codes[dns.RcodeRefused] != 3 {
		t.Fatalf("rcodes %v, want 2 answered and 3 refused", codes)
	}
}

func TestLocalAddressRefused(t *testing.T) {
	ifs, _ := net.InterfaceAddrs()
	for _, a := range ifs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		ip, _ := netip.AddrFromSlice(ipn.IP.To4())
		p := Policy{Mode: ModeAllowlist, CIDRs: []netip.Prefix{netip.PrefixFrom(ip, 32)}}
		if ipAllowed(ip, p, nil) {
			t.Errorf("the host's own %s is allowed", ip)
		}
		return
	}
	t.Skip("no non-loopback IPv4 address")
}

// TestResolverWildcardCaps: names under a listed wildcard, each a message
// to the zone's servers, are capped in length and in distinct names per
// window; exact listed names and names already asked pass.
func TestResolverWildcardCaps(t *testing.T) {
	up := zone(t, nil) // every name NXDOMAIN upstream: the caps decide first
	p := Policy{Mode: ModeAllowlist, Names: []string{"*.zone.test", "exact.test"}}
	now := time.Unix(1_000_000, 0)
	g := &nameGuard{now: func() time.Time { return now }}
	r := &resolver{policy: p, never: Never, up: up, stats: &Stats{}, names: g}
	ask := func(name string) int {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		return r.answer(q).Rcode
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + ".zone.test" // 131 characters
	if got := ask(long); got != dns.RcodeRefused {
		t.Errorf("%d-character name under the wildcard: %s, want REFUSED", len(long), dns.RcodeToString[got])
	}
	for i := range MaxWildcardNames {
		if got := ask(fmt.Sprintf("n%d.zone.test", i)); got == dns.RcodeRefused {
			t.Fatalf("distinct name %d refused, cap %d", i, MaxWildcardNames)
		}
	}
	cases := []struct {
		name, qname string
		refused     bool
	}{
		{"one more distinct name", "n-extra.zone.test", true},
		{"a name asked before", "n3.zone.test", false},
		{"an exact listed name", "exact.test", false},
	}
	for _, c := range cases {
		if got := ask(c.qname); (got == dns.RcodeRefused) != c.refused {
			t.Errorf("%s (%s): %s, refused want %t", c.name, c.qname, dns.RcodeToString[got], c.refused)
		}
	}
	now = now.Add(NameWindow)
	if got := ask("n-extra.zone.test"); got == dns.RcodeRefused {
		t.Errorf("a new window: still refused")
	}
	t.Logf("names capped: %d (cap %d distinct names per %s, %d characters)", r.stats.NamesCapped.Load(), MaxWildcardNames, NameWindow, MaxWildcardName)
}

// TestProxyWildcardCaps: the proxy looks up an SNI, Host or CONNECT name
// itself, so the same caps apply there, with the resolver's count.
func TestProxyWildcardCaps(t *testing.T) {
	p := Policy{Mode: ModeAllowlist, Names: []string{"*.zone.test"}}
	g := &nameGuard{}
	for i := range MaxWildcardNames {
		if !g.allow(p, fmt.Sprintf("n%d.zone.test", i)) {
			t.Fatalf("name %d refused", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	px := &proxy{policy: p, never: Never, up: upstream{timeout: time.Second}, stats: &Stats{}, names: g}
	for _, name := range []string{"n-extra.zone.test", strings.Repeat("x", 60) + "." + strings.Repeat("y", 60) + ".zone.test"} {
		if c, why := px.dial(ctx, hello{name: name, port: 443}, netip.AddrPort{}); c != nil || !strings.Contains(why, "under a wildcard") {
			t.Errorf("proxy to %s: %v %q, want refused by the wildcard caps", name, c, why)
		}
	}
	if n := px.stats.NamesCapped.Load(); n != 2 {
		t.Errorf("names capped %d, want 2", n)
	}
}
