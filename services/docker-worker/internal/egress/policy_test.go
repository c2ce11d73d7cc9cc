package egress

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func TestParse(t *testing.T) {
	never := append(slices.Clone(Never), netip.MustParsePrefix("10.213.0.0/16"))
	cases := []struct {
		name  string
		in    events.NetworkPolicy
		mode  Mode
		names []string
		cidrs []string
		code  events.Code
	}{
		{"zero is deny", events.NetworkPolicy{}, ModeDeny, nil, nil, ""},
		{"allow", events.NetworkPolicy{Egress: "allow"}, ModeAllow, nil, nil, ""},
		{"deny with a list", events.NetworkPolicy{Egress: "deny", Allow: []string{"a.com"}}, "", nil, nil, events.CodeInvalidValue},
		{"unknown mode", events.NetworkPolicy{Egress: "open"}, "", nil, nil, events.CodeInvalidValue},
		{"normalised", events.NetworkPolicy{Egress: "allow", Allow: []string{"API.Example.COM.", "api.example.com", "*.Pkg.dev", "8.8.8.8", "1.2.3.4/24"}},
			ModeAllowlist, []string{"*.pkg.dev", "api.example.com"}, []string{"1.2.3.0/24", "8.8.8.8/32"}, ""},
		{"private CIDR may be listed", events.NetworkPolicy{Egress: "allow", Allow: []string{"192.168.5.0/24"}}, ModeAllowlist, nil, []string{"192.168.5.0/24"}, ""},
		{"single label", events.NetworkPolicy{Egress: "allow", Allow: []string{"localhost"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"ip-like name", events.NetworkPolicy{Egress: "allow", Allow: []string{"1.2.3.4.5"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"octal address", events.NetworkPolicy{Egress: "allow", Allow: []string{"0177.0.0.1"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"hex address", events.NetworkPolicy{Egress: "allow", Allow: []string{"0x7f.0.0.1"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"unicode", events.NetworkPolicy{Egress: "allow", Allow: []string{"bücher.de"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"inner wildcard", events.NetworkPolicy{Egress: "allow", Allow: []string{"a.*.com"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"bare wildcard", events.NetworkPolicy{Egress: "allow", Allow: []string{"*"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"hyphen edge", events.NetworkPolicy{Egress: "allow", Allow: []string{"-a.com"}}, "", nil, nil, events.CodeEgressInvalidEntry},
		{"too broad", events.NetworkPolicy{Egress: "allow", Allow: []string{"0.0.0.0/0"}}, "", nil, nil, events.CodeEgressCIDRTooBroad},
		{"ipv6", events.NetworkPolicy{Egress: "allow", Allow: []string{"::1"}}, "", nil, nil, events.CodeEgressIPv6Unsupported},
		{"mapped ipv4 is ipv4", events.NetworkPolicy{Egress: "allow", Allow: []string{"::ffff:8.8.4.4"}}, ModeAllowlist, nil, []string{"8.8.4.4/32"}, ""},
		{"loopback", events.NetworkPolicy{Egress: "allow", Allow: []string{"127.0.0.1"}}, "", nil, nil, events.CodeEgressCIDRForbidden},
		{"sandbox pool", events.NetworkPolicy{Egress: "allow", Allow: []string{"10.0.0.0/8"}}, "", nil, nil, events.CodeEgressCIDRForbidden},
		{"multicast", events.NetworkPolicy{Egress: "allow", Allow: []string{"224.0.0.251"}}, "", nil, nil, events.CodeEgressCIDRForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse(c.in, Limits{}, never)
			if c.code != "" {
				var e *events.Error
				if !errors.As(err, &e) || e.Code != c.code {
					t.Fatalf("err %v, want %s", err, c.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cidrs []string
			for _, p := range p.CIDRs {
				cidrs = append(cidrs, p.String())
			}
			if p.Mode != c.mode || !slices.Equal(p.Names, c.names) || !slices.Equal(cidrs, c.cidrs) {
				t.Fatalf("got %v %v %v", p.Mode, p.Names, cidrs)
			}
		})
	}
	var e *events.Error
	if _, err := Parse(events.NetworkPolicy{Egress: "allow", Allow: []string{"a.com", "b.com", "c.com"}}, Limits{MaxEntries: 2}, nil); !errors.As(err, &e) || e.Code != events.CodeEgressTooManyEntries {
		t.Fatalf("too many: %v", err)
	}
}

func TestMatchName(t *testing.T) {
	p := Policy{Mode: ModeAllowlist, Names: []string{"*.wild.test", "exact.test"}}
	cases := map[string]bool{
		"exact.test": true, "EXACT.test.": true, "a.exact.test": false, "exact.test.evil": false,
		"a.wild.test": true, "a.b.wild.test": true, "wild.test": false, "evilwild.test": false,
		"": false, "*.wild.test": false, "10.0.0.1": false,
	}
	for name, want := range cases {
		if got := p.MatchName(name); got != want {
			t.Errorf("MatchName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestIPAllowed(t *testing.T) {
	never := append(slices.Clone(Never), netip.MustParsePrefix("10.213.0.0/16"))
	listed := Policy{Mode: ModeAllowlist, CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")}}
	cases := []struct {
		ip   string
		p    Policy
		want bool
	}{
		{"93.184.216.34", Policy{}, true},
		{"10.1.2.3", Policy{}, false},
		{"169.254.169.254", Policy{}, false},
		{"100.64.0.1", Policy{}, false},
		{"127.0.0.1", Policy{}, false},
		{"0.0.0.0", Policy{}, false},
		{"::ffff:10.1.2.3", Policy{}, false},
		{"2001:db8::1", Policy{}, false},
		{"192.168.1.7", listed, true},
		{"192.168.2.7", listed, false},
		{"10.213.0.2", Policy{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/24")}}, false},
	}
	for _, c := range cases {
		if got := ipAllowed(netip.MustParseAddr(c.ip), c.p, never); got != c.want {
			t.Errorf("ipAllowed(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
}

func TestSubnetIndex(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/16")
	for _, i := range []int{0, 1, 31, 8191} {
		s, gw := subnetAt(pool, i)
		if j, ok := indexOf(pool, s); !ok || j != i {
			t.Errorf("index %d: subnet %s back to %d %v", i, s, j, ok)
		}
		if gw != s.Addr().Next() {
			t.Errorf("gateway %s of %s", gw, s)
		}
	}
	if s, _ := subnetAt(pool, 8191); s.String() != "10.213.255.248/29" {
		t.Errorf("last subnet %s", s)
	}
}

func TestNames(t *testing.T) {
	if n := BridgePrefix("w1") + Key("sb-1"); len(n) != 15 {
		t.Errorf("bridge name %q is %d bytes, want 15 (IFNAMSIZ-1)", n, len(n))
	}
}

func FuzzParse(f *testing.F) {
	f.Add("example.com")
	f.Add("*.example.com")
	f.Add("10.0.0.0/8")
	f.Add("::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, entry string) {
		p, err := Parse(events.NetworkPolicy{Egress: "allow", Allow: []string{entry}}, Limits{}, Never)
		if err != nil {
			return
		}
		for _, n := range p.Names {
			if _, ok := NormaliseName(n); !ok {
				t.Fatalf("accepted name %q does not normalise", n)
			}
		}
		for _, c := range p.CIDRs {
			if !c.Addr().Is4() || c.Bits() < 8 || inAny(c.Addr(), Never) {
				t.Fatalf("accepted CIDR %s", c)
			}
		}
	})
}

// TestMetadataNeverReached: the proxy's and resolver's one decision refuses
// metadata addresses even when a policy lists them (one that skipped
// validation), unless the operator allowed them.
func TestMetadataNeverReached(t *testing.T) {
	listed := Policy{Mode: ModeAllowlist, CIDRs: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32"),
		netip.MustParsePrefix("100.100.100.200/32"), netip.MustParsePrefix("168.63.129.16/32")}}
	cases := []struct {
		ip      string
		p       Policy
		allowed bool // operator's AllowMetadata
		want    bool
	}{
		{"169.254.169.254", listed, false, false},
		{"100.100.100.200", listed, false, false},
		{"168.63.129.16", listed, false, false},
		{"168.63.129.16", Policy{Mode: ModeAllow}, false, false},
		{"169.254.169.254", listed, true, true},
		{"168.63.129.16", Policy{Mode: ModeAllow}, true, true},
		{"169.254.169.254", Policy{Mode: ModeAllow}, true, false}, // still private: listed only
	}
	for _, c := range cases {
		if got := ipAllowed(netip.MustParseAddr(c.ip), c.p, NeverRanges(c.allowed)); got != c.want {
			t.Errorf("ipAllowed(%s, %s, operator allows %v) = %v, want %v", c.ip, c.p.Mode, c.allowed, got, c.want)
		}
	}
	for _, entry := range []string{"169.254.169.254/32", "100.100.100.200", "168.63.129.16", "169.0.0.0/8", "fe80::1", "fd00:ec2::254"} {
		_, err := Parse(events.NetworkPolicy{Egress: "allow", Allow: []string{entry}}, Limits{}, NeverRanges(false))
		var e *events.Error
		if !errors.As(err, &e) || e.Code != events.CodeEgressCIDRForbidden {
			t.Errorf("Parse(%s): %v, want %s", entry, err, events.CodeEgressCIDRForbidden)
		}
	}
}
