package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// localAddrs answers whether an address is the host's own now — addresses
// appear after start (DHCP, a new bridge, a VPN) — refreshed at most every
// two seconds. The proxy and the resolver ask it before every decision, so
// a listed name pointing at the host never reaches a host service.
var localAddrs = &localCache{}

type localCache struct {
	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]struct{}
}

func (c *localCache) has(ip netip.Addr) bool {
	ip = ip.Unmap()
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 2*time.Second {
		c.addrs = map[netip.Addr]struct{}{}
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if ipn, ok := a.(*net.IPNet); ok {
					if x, ok := netip.AddrFromSlice(ipn.IP); ok {
						c.addrs[x.Unmap()] = struct{}{}
					}
				}
			}
		}
		c.at = time.Now()
	}
	_, ok := c.addrs[ip]
	return ok
}
