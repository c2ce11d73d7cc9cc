package egress

import "net/netip"

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
