package events

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestIsolationTierRank(t *testing.T) {
	order := []IsolationTier{TierUnknown, TierContainer, TierGVisor, TierMicroVM}
	for i := 1; i < len(order); i++ {
		if order[i-1].Rank() >= order[i].Rank() {
			t.Errorf("%s (rank %d) does not rank below %s (rank %d)", order[i-1], order[i-1].Rank(), order[i], order[i].Rank())
		}
		if gap := order[i].Rank() - order[i-1].Rank(); gap != 10 {
			t.Errorf("ranks of %s and %s are %d apart, want 10 (room for a future tier)", order[i-1], order[i], gap)
		}
	}
	for _, tier := range order {
		if !tier.Known() {
			t.Errorf("%s is not Known", tier)
		}
	}
	for _, tier := range []IsolationTier{"", "vm", "Container", "firecracker"} {
		if tier.Known() {
			t.Errorf("%q is Known", tier)
		}
		if tier.Rank() != 0 {
			t.Errorf("%q has rank %d, want 0", tier, tier.Rank())
		}
	}
}

func TestIsolationTierSatisfies(t *testing.T) {
	tests := []struct {
		tier, min IsolationTier
		want      bool
	}{
		// The empty requirement is met by every tier.
		{TierUnknown, "", true},
		{TierContainer, "", true},
		{TierMicroVM, "", true},
		// unknown satisfies no requirement, not even unknown.
		{TierUnknown, TierUnknown, false},
		{TierUnknown, TierContainer, false},
		{TierUnknown, TierMicroVM, false},
		// Unrecognised tiers satisfy nothing and are satisfied by nothing.
		{"bogus", TierContainer, false},
		{"bogus", TierUnknown, false},
		{TierMicroVM, "bogus", false},
		// The order.
		{TierContainer, TierUnknown, true},
		{TierContainer, TierContainer, true},
		{TierContainer, TierGVisor, false},
		{TierContainer, TierMicroVM, false},
		{TierGVisor, TierContainer, true},
		{TierGVisor, TierGVisor, true},
		{TierGVisor, TierMicroVM, false},
		{TierMicroVM, TierContainer, true},
		{TierMicroVM, TierGVisor, true},
		{TierMicroVM, TierMicroVM, true},
	}
	for _, tt := range tests {
		if got := tt.tier.Satisfies(tt.min); got != tt.want {
			t.Errorf("%q.Satisfies(%q) = %v, want %v", tt.tier, tt.min, got, tt.want)
		}
	}
}

func TestParseIsolationTier(t *testing.T) {
	for _, s := range []string{"", "unknown", "container", "gvisor", "microvm"} {
		if got, err := ParseIsolationTier(s); err != nil || string(got) != s {
			t.Errorf("ParseIsolationTier(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"vm", "Container", " gvisor"} {
		if _, err := ParseIsolationTier(s); err == nil {
			t.Errorf("ParseIsolationTier(%q) accepted it", s)
		}
	}
}

func TestNetworkPolicyValidate(t *testing.T) {
	tests := []struct {
		name    string
		p       NetworkPolicy
		wantErr bool
	}{
		{"zero value denies", NetworkPolicy{}, false},
		{"deny", NetworkPolicy{Egress: EgressDeny}, false},
		{"allow everything", NetworkPolicy{Egress: EgressAllow}, false},
		{"allow list", NetworkPolicy{Egress: EgressAllow, Allow: []string{"pypi.org", "*.github.com", "10.0.0.0/8", "192.168.1.1", "::1", "2001:db8::/32", "Example.COM"}}, false},
		{"allow list without allow", NetworkPolicy{Allow: []string{"pypi.org"}}, true},
		{"allow list with deny", NetworkPolicy{Egress: EgressDeny, Allow: []string{"pypi.org"}}, true},
		{"unknown mode", NetworkPolicy{Egress: "open"}, true},
		{"upper-case mode", NetworkPolicy{Egress: "ALLOW"}, true},
		{"empty entry", NetworkPolicy{Egress: EgressAllow, Allow: []string{""}}, true},
		{"space in host", NetworkPolicy{Egress: EgressAllow, Allow: []string{"pypi .org"}}, true},
		{"url, not host", NetworkPolicy{Egress: EgressAllow, Allow: []string{"https://pypi.org"}}, true},
		{"bare wildcard", NetworkPolicy{Egress: EgressAllow, Allow: []string{"*"}}, true},
		{"empty label", NetworkPolicy{Egress: EgressAllow, Allow: []string{"a..b"}}, true},
		{"label too long", NetworkPolicy{Egress: EgressAllow, Allow: []string{strings.Repeat("a", 64) + ".com"}}, true},
		{"bad CIDR", NetworkPolicy{Egress: EgressAllow, Allow: []string{"10.0.0.0/33"}}, true},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
	if (NetworkPolicy{}).EgressAllowed() || !(NetworkPolicy{Egress: EgressAllow}).EgressAllowed() {
		t.Error("EgressAllowed: the zero value must deny and allow must allow")
	}
}

func TestCapabilities(t *testing.T) {
	have := Capabilities{CapStream, CapExec, CapFiles}
	tests := []struct {
		want []Capability
		miss []Capability
	}{
		{nil, nil},
		{[]Capability{CapExec}, nil},
		{[]Capability{CapExec, CapStream, CapFiles}, nil},
		{[]Capability{CapRunCode}, []Capability{CapRunCode}},
		{[]Capability{CapNetworkAllowlist, CapExec, CapPause}, []Capability{CapNetworkAllowlist, CapPause}},
	}
	for _, tt := range tests {
		if got := have.Missing(tt.want); !slices.Equal(got, tt.miss) {
			t.Errorf("Missing(%v) = %v, want %v", tt.want, got, tt.miss)
		}
	}
	if got := Capabilities(nil).Missing([]Capability{CapExec}); !slices.Equal(got, []Capability{CapExec}) {
		t.Errorf("nil set Missing(exec) = %v", got)
	}
	for _, c := range AllCapabilities {
		if !c.Known() {
			t.Errorf("%s is not Known", c)
		}
	}
	if Capability("teleport").Known() {
		t.Error("an undefined capability is Known")
	}
}

func TestCapabilitiesMarshalJSON(t *testing.T) {
	tests := []struct {
		in   Capabilities
		want string
	}{
		{nil, `[]`},
		{Capabilities{}, `[]`},
		{Capabilities{CapStream, CapExec, CapFiles}, `["exec","files","stream"]`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.in)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tt.in, b, err, tt.want)
		}
	}
	// Inside a struct, a nil set is [] and not null; marshalling does not reorder the caller's slice.
	in := Capabilities{CapStream, CapExec}
	b, _ := json.Marshal(struct {
		C Capabilities `json:"c"`
		N Capabilities `json:"n"`
	}{C: in})
	if string(b) != `{"c":["exec","stream"],"n":[]}` {
		t.Errorf("in a struct: %s", b)
	}
	if in[0] != CapStream {
		t.Errorf("MarshalJSON sorted the caller's slice in place: %v", in)
	}
}
