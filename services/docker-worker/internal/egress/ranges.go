package egress

import (
	"net/netip"
	"slices"
)

// Never are the ranges no sandbox reaches whatever its policy lists: "this
// network", loopback, multicast, reserved and broadcast. The host's own
// addresses, the sandbox pool and the operator's deny list are added at
// run time (see Manager.never).
var Never = mustPrefixes("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4")

// Private are the ranges a sandbox reaches only when a listed CIDR covers
// them: RFC 1918, shared address space (CGNAT), link-local (cloud metadata
// at 169.254.169.254), the IETF protocol block and benchmark nets.
var Private = mustPrefixes("10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15")

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func inAny(ip netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ipAllowed is the one decision on a destination address the proxy or the
// resolver saw: never a never-range, never IPv6, private only when listed.
func ipAllowed(ip netip.Addr, p Policy, never []netip.Prefix) bool {
	ip = ip.Unmap()
	if !ip.Is4() || inAny(ip, never) || localAddrs.has(ip) {
		return false
	}
	if inAny(ip, Private) {
		return p.Listed(ip)
	}
	return true
}

// Metadata are link-local and cloud metadata addresses: all of IPv4
// link-local (AWS, GCP, OpenStack and others at 169.254.169.254), Alibaba's
// 100.100.100.200 and Azure's wire server 168.63.129.16 (a public
// address). No sandbox reaches them, listed or not, unless the operator
// allows them (Config.AllowMetadata). The IPv6 ones are in MetadataV6.
var Metadata = mustPrefixes("169.254.0.0/16", "100.100.100.200/32", "168.63.129.16/32")

// MetadataV6 are IPv6 link-local and AWS's IPv6 metadata address. Sandboxes
// have no IPv6 route at all; these only name the refusal of a listed entry.
var MetadataV6 = mustPrefixes("fe80::/10", "fd00:ec2::254/128")

// NeverRanges are the built-in ranges no sandbox reaches: Never, and
// Metadata unless allowMetadata.
func NeverRanges(allowMetadata bool) []netip.Prefix {
	out := slices.Clone(Never)
	if !allowMetadata {
		out = append(out, Metadata...)
	}
	return out
}

// isMetadata reports whether n is one of the metadata ranges.
func isMetadata(n netip.Prefix) bool {
	return slices.Contains(Metadata, n) || slices.Contains(MetadataV6, n)
}
