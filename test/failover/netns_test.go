package failover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// netns is a network namespace of the harness's own, joined to the host by
// a veth pair on a private /30: a process started in it reaches the host
// (and NATS, listening on the host end's address) only through the veth.
// Taking the namespace's end down cuts the process off; nothing else on the
// host is touched, and t.Cleanup deletes the namespace and the pair.
type netns struct {
	name       string // the namespace, sbxfo-<pid>-<n>
	host, peer string // the veth's host and namespace ends
	hostIP     string // the host end's address (NATS listens there)
	peerIP     string
	url        string // NATS as the process in the namespace dials it
}

var netnsSeq atomic.Int32

// newNetns makes a namespace with its veth, or says why it cannot (not
// root, no iproute2, no free /30, a command refused).
func newNetns(t *testing.T) (*netns, error) {
	t.Helper()
	if os.Getenv("SBX_FAILOVER_CUT") == "proxy" {
		return nil, errors.New("SBX_FAILOVER_CUT=proxy")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("no ip (iproute2) on PATH")
	}
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n := &netns{hostIP: addrIn(subnet, 1), peerIP: addrIn(subnet, 2)}
	seq, pid := netnsSeq.Add(1), os.Getpid()
	n.name = fmt.Sprintf("sbxfo-%d-%d", pid, seq)
	n.host, n.peer = fmt.Sprintf("sfo%d-%dh", pid, seq), fmt.Sprintf("sfo%d-%dn", pid, seq)
	if err := ip("netns", "add", n.name); err != nil {
		return nil, err
	}
	t.Cleanup(n.remove)
	if err := n.wire(); err != nil {
		n.remove()
		return nil, err
	}
	return n, nil
}

// wire creates the veth pair, addresses it and brings it up.
func (n *netns) wire() error {
	steps := [][]string{
		{"link", "add", n.host, "type", "veth", "peer", "name", n.peer, "netns", n.name},
		{"addr", "add", n.hostIP + "/30", "dev", n.host},
		{"link", "set", n.host, "up"},
		{"-n", n.name, "addr", "add", n.peerIP + "/30", "dev", n.peer},
		{"-n", n.name, "link", "set", "lo", "up"},
		{"-n", n.name, "link", "set", n.peer, "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the namespace (which destroys the veth pair with it) and
// the host end if it outlived it. Only the harness's own names.
func (n *netns) remove() {
	_ = ip("netns", "delete", n.name)
	if ip("link", "show", n.host) == nil {
		_ = ip("link", "delete", n.host)
	}
}

// URL is NATS as the process in the namespace reaches it.
func (n *netns) URL() string { return n.url }

// wrap runs a command in the namespace (`ip netns exec` execs it: the
// process keeps the pid the harness signals).
func (n *netns) wrap() []string { return []string{"ip", "netns", "exec", n.name} }

// cut takes the namespace's end of the veth down (on) or up again.
func (n *netns) cut(t *testing.T, on bool) {
	t.Helper()
	state := "up"
	if on {
		state = "down"
	}
	if err := ip("-n", n.name, "link", "set", n.peer, state); err != nil {
		t.Fatalf("cut: %v", err)
	}
}

func (n *netns) String() string {
	return fmt.Sprintf("network namespace %s (veth %s %s/30 ↔ %s), its end taken down", n.name, n.host, n.hostIP, n.peerIP)
}

// ip runs iproute2's ip with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// freeSubnet picks a /30 in 10.219.0.0/16 that none of the host's routes
// (any table, the default route aside) overlaps, starting at a place given
// by the pid so that two runs rarely try the same one.
func freeSubnet() (*net.IPNet, error) {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("ip route: %v", err)
	}
	used := routePrefixes(string(out))
	const n = 1 << 14 // /30s in a /16
	start := os.Getpid() * 7
	for i := range n {
		k := (start + i) % n
		c := &net.IPNet{IP: net.IPv4(10, 219, byte(k>>6), byte(k&63)<<2).To4(), Mask: net.CIDRMask(30, 32)}
		if !overlapsAny(c, used) {
			return c, nil
		}
	}
	return nil, errors.New("no free /30 in 10.219.0.0/16")
}

// routePrefixes reads the destinations of `ip -o route` lines ("default"
// left out: it overlaps everything and routes nothing of ours).
func routePrefixes(out string) []*net.IPNet {
	types := map[string]bool{"local": true, "broadcast": true, "unicast": true, "multicast": true,
		"anycast": true, "blackhole": true, "unreachable": true, "prohibit": true, "throw": true, "nat": true}
	var ps []*net.IPNet
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && types[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, p, err := net.ParseCIDR(dst); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

func overlapsAny(c *net.IPNet, ps []*net.IPNet) bool {
	for _, p := range ps {
		if p.Contains(c.IP) || c.Contains(p.IP) {
			return true
		}
	}
	return false
}

// addrIn is the i-th address of subnet.
func addrIn(subnet *net.IPNet, i byte) string {
	a := append(net.IP(nil), subnet.IP.To4()...)
	a[3] += i
	return a.String()
}

func TestRoutePrefixesAndOverlap(t *testing.T) {
	out := "default via 192.0.2.1 dev eth0\n" +
		"10.219.0.0/24 dev x proto kernel scope link src 10.219.0.1\n" +
		"local 10.219.1.5 dev y table local proto kernel scope host src 10.219.1.5\n" +
		"broadcast 10.219.2.3 dev z table local\n"
	ps := routePrefixes(out)
	if len(ps) != 3 {
		t.Fatalf("prefixes %v, want 3 (default left out)", ps)
	}
	for _, c := range []struct {
		subnet string
		want   bool
	}{
		{"10.219.0.4/30", true}, {"10.219.1.4/30", true}, {"10.219.2.0/30", true},
		{"10.219.1.8/30", false}, {"10.219.3.0/30", false}, {"10.218.0.0/30", false},
	} {
		_, s, _ := net.ParseCIDR(c.subnet)
		if got := overlapsAny(s, ps); got != c.want {
			t.Errorf("overlaps(%s) = %v, want %v", c.subnet, got, c.want)
		}
	}
	if _, s, _ := net.ParseCIDR("10.219.7.8/30"); addrIn(s, 1) != "10.219.7.9" {
		t.Errorf("addrIn = %s", addrIn(s, 1))
	}
}

// TestNetnsCleanedUp: the namespace and its veth exist while the test that
// made them runs, are cut and restored, and are gone after it, failed or
// not (t.Cleanup).
func TestNetnsCleanedUp(t *testing.T) {
	full(t)
	var n *netns
	t.Run("make", func(t *testing.T) {
		var err error
		if n, err = newNetns(t); err != nil {
			t.Skip("no network namespace here: ", err)
		}
		if err := ip("-n", n.name, "link", "show", n.peer); err != nil {
			t.Fatal(err)
		}
		n.cut(t, true)
		n.cut(t, false)
	})
	if n == nil {
		t.Skip("no network namespace here")
	}
	if err := ip("-n", n.name, "link", "show"); err == nil {
		t.Errorf("namespace %s still there", n.name)
	}
	if err := ip("link", "show", n.host); err == nil {
		t.Errorf("veth %s still there", n.host)
	}
}
