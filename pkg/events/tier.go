package events

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
)

// IsolationTier orders sandboxes by escape resistance, and nothing else.
type IsolationTier string

// The tiers, weakest first.
const (
	TierUnknown   IsolationTier = "unknown"
	TierContainer IsolationTier = "container"
	TierGVisor    IsolationTier = "gvisor"
	TierMicroVM   IsolationTier = "microvm"
)

// tierRank is spaced by 10 so that a future tier fits between two others
// without renumbering.
var tierRank = map[IsolationTier]int{
	TierUnknown:   0,
	TierContainer: 10,
	TierGVisor:    20,
	TierMicroVM:   30,
}

// Rank is the tier's position in the order; unknown and unrecognised tiers rank 0.
func (t IsolationTier) Rank() int { return tierRank[t] }

// Known reports whether t is one of the defined tiers.
func (t IsolationTier) Known() bool { _, ok := tierRank[t]; return ok }

// Satisfies reports whether a sandbox of tier t meets the requirement min.
// The empty requirement is met by every tier; unknown meets no requirement.
func (t IsolationTier) Satisfies(min IsolationTier) bool {
	if min == "" {
		return true
	}
	if t == TierUnknown || !t.Known() || !min.Known() {
		return false
	}
	return t.Rank() >= min.Rank()
}

// ParseIsolationTier accepts a tier name; the empty string means "no requirement".
func ParseIsolationTier(s string) (IsolationTier, error) {
	t := IsolationTier(s)
	if s == "" || t.Known() {
		return t, nil
	}
	return "", fmt.Errorf("unknown isolation tier %q (want one of unknown, container, gvisor, microvm)", s)
}

// Egress modes of a NetworkPolicy.
const (
	EgressDeny  = "deny"
	EgressAllow = "allow"
)

// NetworkPolicy is a sandbox's outbound network. The zero value denies all
// egress: deny is the default.
type NetworkPolicy struct {
	Egress string   `json:"egress,omitempty"` // "deny" (default) or "allow"
	Allow  []string `json:"allow,omitempty"`  // hosts or CIDRs; empty with egress allow means everything
}

// EgressAllowed reports whether the policy opens any egress.
func (p NetworkPolicy) EgressAllowed() bool { return p.Egress == EgressAllow }

// Validate checks the mode and every allowlist entry.
func (p NetworkPolicy) Validate() error {
	switch p.Egress {
	case "", EgressDeny:
		if len(p.Allow) > 0 {
			return fmt.Errorf("network.allow is set but network.egress is %q; set egress to \"allow\"", p.Egress)
		}
	case EgressAllow:
	default:
		return fmt.Errorf("network.egress %q: want \"deny\" or \"allow\"", p.Egress)
	}
	for _, h := range p.Allow {
		if !validHostOrCIDR(h) {
			// The code a worker gives an entry only it refuses: one code
			// for a bad entry, whichever check finds it.
			return Errorf(CodeEgressInvalidEntry, "network.allow entry %q is neither a host name, an IP address nor a CIDR", h).
				With("entry", h).With("field", "network")
		}
	}
	return nil
}

func validHostOrCIDR(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	if _, _, err := net.ParseCIDR(s); err == nil {
		return true
	}
	if net.ParseIP(s) != nil {
		return true
	}
	s = strings.TrimPrefix(s, "*.")
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Capability is something a backend can do beyond creating a sandbox.
type Capability string

// The capabilities a worker may advertise.
const (
	CapExec             Capability = "exec"
	CapStream           Capability = "stream"
	CapFiles            Capability = "files"
	CapRunCode          Capability = "run_code"
	CapStatefulCode     Capability = "stateful_code"
	CapNetworkAllowlist Capability = "network_allowlist"
	CapSetTimeout       Capability = "set_timeout"
	CapSignal           Capability = "signal"
	CapStdin            Capability = "stdin"
	CapPause            Capability = "pause"
	// CapDiskQuota: the backend enforces resources.disk_mb (a kernel or
	// storage-driver quota on the sandbox's writable storage). A worker
	// without it refuses disk_mb with CapabilityNotSupported.
	CapDiskQuota Capability = "disk_quota"
)

// AllCapabilities lists every defined capability.
var AllCapabilities = []Capability{CapExec, CapStream, CapFiles, CapRunCode, CapStatefulCode,
	CapNetworkAllowlist, CapSetTimeout, CapSignal, CapStdin, CapPause,
	CapDiskQuota, CapFilesWatch, CapPorts, CapSnapshot}

// Known reports whether c is a defined capability.
func (c Capability) Known() bool { return slices.Contains(AllCapabilities, c) }

// Capabilities is a set of capabilities, kept sorted on the wire.
type Capabilities []Capability

// Has reports whether the set contains c.
func (cs Capabilities) Has(c Capability) bool { return slices.Contains(cs, c) }

// Missing returns the members of want that cs lacks.
func (cs Capabilities) Missing(want []Capability) []Capability {
	var out []Capability
	for _, c := range want {
		if !cs.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// MarshalJSON writes the set sorted and never as null.
func (cs Capabilities) MarshalJSON() ([]byte, error) {
	s := slices.Clone(cs)
	slices.Sort(s)
	if s == nil {
		s = []Capability{}
	}
	return json.Marshal([]Capability(s))
}
