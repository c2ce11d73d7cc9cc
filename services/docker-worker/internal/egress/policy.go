package egress

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Mode is what a policy lets out.
type Mode string

// The modes.
const (
	ModeDeny      Mode = "deny"      // no interface
	ModeAllow     Mode = "allow"     // every public address, nothing private
	ModeAllowlist Mode = "allowlist" // listed names and CIDRs only
)

// Limits bound what a policy may ask for.
type Limits struct {
	// MaxEntries caps network.allow. Default 64.
	MaxEntries int
	// MinPrefix is the shortest CIDR prefix accepted. Default 8.
	MinPrefix int
}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = 64
	}
	if l.MinPrefix <= 0 {
		l.MinPrefix = 8
	}
	return l
}

// Policy is a validated, normalised network policy.
type Policy struct {
	Mode Mode
	// Names are lower-case DNS names without a trailing dot; "*.x.y" matches
	// any name below x.y (any depth), never x.y itself.
	Names []string
	// CIDRs are IPv4 prefixes, masked, sorted, without duplicates.
	CIDRs []netip.Prefix
}

// Parse validates p against the limits and the never-reachable ranges and
// normalises it. Errors carry SBX_E1720–1724 codes.
func Parse(p events.NetworkPolicy, lim Limits, never []netip.Prefix) (Policy, error) {
	lim = lim.withDefaults()
	switch p.Egress {
	case "", events.EgressDeny:
		if len(p.Allow) > 0 {
			return Policy{}, events.Errorf(events.CodeInvalidValue, "network.allow is set but network.egress is %q", p.Egress).With("field", "network.allow")
		}
		return Policy{Mode: ModeDeny}, nil
	case events.EgressAllow:
	default:
		return Policy{}, events.Errorf(events.CodeInvalidValue, "network.egress %q", p.Egress).With("field", "network.egress")
	}
	if len(p.Allow) == 0 {
		return Policy{Mode: ModeAllow}, nil
	}
	if len(p.Allow) > lim.MaxEntries {
		return Policy{}, events.Errorf(events.CodeEgressTooManyEntries, "network.allow has %d entries, at most %d are allowed", len(p.Allow), lim.MaxEntries).
			With("field", "network.allow").With("max", lim.MaxEntries)
	}
	out := Policy{Mode: ModeAllowlist}
	for _, e := range p.Allow {
		if err := out.add(e, lim, never); err != nil {
			return Policy{}, err
		}
	}
	slices.Sort(out.Names)
	out.Names = slices.Compact(out.Names)
	slices.SortFunc(out.CIDRs, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out.CIDRs = slices.Compact(out.CIDRs)
	return out, nil
}

func (p *Policy) add(entry string, lim Limits, never []netip.Prefix) error {
	bad := func(code events.Code, format string, args ...any) error {
		return events.Errorf(code, format, args...).With("field", "network.allow").With("entry", truncate(entry))
	}
	if pfx, ok, err := parseAddrOrCIDR(entry); ok {
		switch {
		case err != nil:
			return bad(events.CodeEgressInvalidEntry, "network.allow entry %q: %v", truncate(entry), err)
		case !pfx.Addr().Is4() && overlapsAny(pfx, MetadataV6) && !metadataAllowed(never):
			return metadataRefused(bad, entry)
		case !pfx.Addr().Is4():
			return bad(events.CodeEgressIPv6Unsupported, "network.allow entry %q is IPv6; sandboxes have no IPv6 route", truncate(entry))
		case pfx.Bits() < lim.MinPrefix:
			return bad(events.CodeEgressCIDRTooBroad, "network.allow entry %q is wider than /%d", truncate(entry), lim.MinPrefix)
		}
		for _, n := range never {
			if n.Overlaps(pfx) && isMetadata(n) {
				return metadataRefused(bad, entry)
			}
			if n.Overlaps(pfx) {
				return bad(events.CodeEgressCIDRForbidden, "network.allow entry %q overlaps %s, which no sandbox may reach", truncate(entry), n)
			}
		}
		p.CIDRs = append(p.CIDRs, pfx)
		return nil
	}
	name, ok := NormaliseName(entry)
	if !ok {
		return bad(events.CodeEgressInvalidEntry, "network.allow entry %q is neither a DNS name nor an IPv4 address or CIDR", truncate(entry))
	}
	p.Names = append(p.Names, name)
	return nil
}

// metadataRefused is the refusal of an entry that reaches a link-local or
// cloud metadata address.
func metadataRefused(bad func(events.Code, string, ...any) error, entry string) error {
	return bad(events.CodeEgressCIDRForbidden, "network.allow entry %q reaches link-local or cloud metadata addresses, "+
		"which no sandbox may reach unless the worker's operator allows them", truncate(entry))
}

// metadataAllowed reports whether the operator allowed metadata addresses:
// never holds none of them.
func metadataAllowed(never []netip.Prefix) bool {
	return !slices.ContainsFunc(never, isMetadata)
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, p.Overlaps)
}

// parseAddrOrCIDR reports ok when s looks like an address or a CIDR (it has
// a colon, a slash, or only digits and dots), with err when it is one that
// does not parse strictly (octal, hex, short forms are refused).
func parseAddrOrCIDR(s string) (netip.Prefix, bool, error) {
	looks := strings.ContainsAny(s, ":/") || strings.Trim(s, "0123456789.") == ""
	if !looks {
		return netip.Prefix{}, false, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, true, err
		}
		return p.Masked(), true, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, true, err
	}
	a = a.Unmap()
	if a.Zone() != "" {
		return netip.Prefix{}, true, strconv.ErrSyntax
	}
	return netip.PrefixFrom(a, a.BitLen()), true, nil
}

// NormaliseName lower-cases a DNS name (or a "*." pattern), drops one
// trailing dot and checks it: ASCII letters, digits and hyphens, labels of
// 1–63 bytes not starting or ending with a hyphen, at least two labels, at
// most 253 bytes, and a last label that is not all digits (no IP-like names).
func NormaliseName(s string) (string, bool) {
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	wild := strings.HasPrefix(s, "*.")
	base := strings.TrimPrefix(s, "*.")
	if base == "" || len(base) > 253 {
		return "", false
	}
	labels := strings.Split(base, ".")
	if len(labels) < 2 {
		return "", false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", false
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", false
	}
	if wild {
		return "*." + base, true
	}
	return base, true
}

// MatchName reports whether the (already normalised) name is allowed.
func (p Policy) MatchName(name string) bool {
	name, ok := NormaliseName(name)
	if !ok || strings.HasPrefix(name, "*.") {
		return false
	}
	for _, pat := range p.Names {
		if suffix, ok := strings.CutPrefix(pat, "*"); ok {
			if strings.HasSuffix(name, suffix) {
				return true
			}
		} else if pat == name {
			return true
		}
	}
	return false
}

// Listed reports whether ip is inside a listed CIDR.
func (p Policy) Listed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, c := range p.CIDRs {
		if c.Contains(ip) {
			return true
		}
	}
	return false
}

// Entries is the policy as network.allow entries, names first.
func (p Policy) Entries() []string {
	out := slices.Clone(p.Names)
	for _, c := range p.CIDRs {
		out = append(out, c.String())
	}
	return out
}

// Record is the policy in effect as it goes into the sandbox's record.
func (p Policy) Record() *events.NetworkPolicy {
	if p.Mode == ModeDeny {
		return &events.NetworkPolicy{Egress: events.EgressDeny}
	}
	return &events.NetworkPolicy{Egress: events.EgressAllow, Allow: p.Entries()}
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
