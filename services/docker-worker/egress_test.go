//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// egressRig is one backend with its own "internet", upstream zone and host
// listener.
type egressRig struct {
	b      *Backend
	inet   *internet
	host   *hostListener
	hostIP netip.Addr // an address of the host's outside interface
}

func newEgressRig(t *testing.T, cfg Config) *egressRig {
	t.Helper()
	needEgressHost(t)
	needDocker(t)
	r := &egressRig{inet: newInternet(t), host: newHostListener(t)}
	up := fakeDNS(t, map[string]string{
		"allowed.test": r.inet.ip.String(),
		"other.test":   r.inet.ip.String(),
		"*.wild.test":  r.inet.ip.String(),
		"rebind.test":  "10.1.2.3",
		"loop.test":    "127.0.0.1",
		"meta.test":    "169.254.169.254",
	})
	if cfg.WorkerID == "" {
		cfg.WorkerID = randID("test-")
	}
	cfg.Egress.DNS = []string{up}
	dropEgressTable(t, cfg.WorkerID)
	r.b = newTestBackend(t, cfg)
	if r.b.egress.mgr == nil {
		t.Fatalf("egress unavailable: %s", r.b.egress.why)
	}
	r.hostIP = outsideIP(t)
	return r
}

func outsideIP(t *testing.T) netip.Addr {
	t.Helper()
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, "sbx") || strings.HasPrefix(ifc.Name, "docker") || strings.HasPrefix(ifc.Name, "br-") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				ip, _ := netip.AddrFromSlice(ipn.IP.To4())
				return ip
			}
		}
	}
	t.Skip("no outside IPv4 address on this host")
	return netip.Addr{}
}

// probe runs a shell script in the sandbox and returns its output, whatever
// its exit status.
func probe(t *testing.T, b *Backend, id, script string) string {
	t.Helper()
	r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", script}})
	return strings.TrimSpace(r.stdout + r.stderr)
}

func createWith(t *testing.T, b *Backend, n events.NetworkPolicy, opts ...createOpt) (string, worker.Created) {
	t.Helper()
	spec := newSpec(append([]createOpt{withNetwork(n)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create %+v: %v", n, err)
	}
	t.Logf("create egress=%s allow=%d entries: %s", n.Egress, len(n.Allow), time.Since(start).Round(time.Millisecond))
	return spec.SandboxID, out
}

func sandboxAddr(t *testing.T, b *Backend, id string) (ip, gw string) {
	t.Helper()
	ins, err := b.cli.ContainerInspect(context.Background(), namePrefix+id)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ins.NetworkSettings.Networks {
		return n.IPAddress, n.Gateway
	}
	t.Fatalf("sandbox %s has no network", id)
	return "", ""
}

func httpGet(host, addr string) string {
	return fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s 80`, host, addr)
}

// TestEgressDeny: deny is no interface, and the record says deny.
func TestEgressDeny(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id, out := createWith(t, b, events.NetworkPolicy{Egress: events.EgressDeny})
	if got := sh(t, b, id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,"); got != "lo," {
		t.Errorf("interfaces %q, want lo only", got)
	}
	if out.Network == nil || out.Network.Egress != events.EgressDeny {
		t.Errorf("record network %+v", out.Network)
	}
}

// TestEgressAllow: outbound only. The internet answers; a host listener on
// 0.0.0.0 (via the gateway, the host's own address, docker0) and a second
// sandbox do not.
func TestEgressAllow(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	a, out := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow})
	other, _ := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow})
	if out.Network == nil || out.Network.Egress != events.EgressAllow || len(out.Network.Allow) != 0 {
		t.Errorf("record network %+v", out.Network)
	}
	_, gw := sandboxAddr(t, b, a)
	otherIP, otherGW := sandboxAddr(t, b, other)
	// A listener in the second sandbox, left running (exec detached).
	sh(t, b, other, "(echo other secret | nc -l -p 8080 >/dev/null 2>&1 &) ; true")
	eventually(t, 10*time.Second, "listener in the second sandbox", func() bool {
		return strings.Contains(probe(t, b, other, "netstat -ltn 2>/dev/null"), ":8080")
	})

	if got := probe(t, b, a, httpGet("allowed.test", r.inet.ip.String())); !strings.Contains(got, "hello allowed.test") {
		t.Errorf("internet by address: %q", got)
	}
	if got := probe(t, b, a, httpGet("allowed.test", "allowed.test")); !strings.Contains(got, "hello allowed.test") {
		t.Errorf("internet by name: %q", got)
	}
	refused := 0
	for _, dst := range []string{gw, r.hostIP.String(), "172.17.0.1", "127.0.0.1"} {
		got := probe(t, b, a, fmt.Sprintf("nc -w 2 %s %d </dev/null; echo rc=$?", dst, r.host.port))
		if strings.Contains(got, "host secret") {
			t.Errorf("host listener reached via %s: %q", dst, got)
		} else {
			refused++
		}
	}
	if got := probe(t, b, a, fmt.Sprintf("nc -w 2 %s 8080 </dev/null; echo rc=$?", otherIP)); strings.Contains(got, "other secret") {
		t.Errorf("second sandbox reached: %q", got)
	} else {
		refused++
	}
	// No IPv6 beyond link-local: the host rules are IPv4, and drop the rest.
	if got := probe(t, b, a, "awk '$4 == \"00\" && $6 != \"lo\"' /proc/net/if_inet6; grep -c '^00000000000000000000000000000000 00 .* eth0$' /proc/net/ipv6_route || true"); got != "0" {
		t.Errorf("IPv6 global address or default route: %q", got)
	}
	udpBefore := r.inet.udpHits.Load()
	probe(t, b, a, "timeout 3 nslookup x.test "+r.inet.ip.String()+" 2>&1")
	if r.inet.udpHits.Load() == udpBefore {
		t.Errorf("udp to the internet did not arrive")
	}
	if got := probe(t, b, a, "timeout 5 nslookup allowed.test "+otherGW+" 2>&1; echo rc=$?"); strings.Contains(got, r.inet.ip.String()) {
		t.Errorf("another sandbox's resolver answered: %q", got)
	} else {
		refused++
	}
	if got := probe(t, b, a, "nslookup rebind.test 2>&1; echo rc=$?"); strings.Contains(got, "10.1.2.3") {
		t.Errorf("rebinding answer passed: %q", got)
	}
	if n := r.host.accepted.Load(); n != 0 {
		t.Errorf("host listener accepted %d connections from a sandbox", n)
	}
	drops, _ := b.egress.mgr.DropCounts()
	t.Logf("allow: internet reached; %d of 6 forbidden destinations refused (host via gateway, host address, docker0, loopback, other sandbox, other sandbox's resolver); host listener accepted %d; packets dropped by host rules: %d; egress counts %+v",
		refused, r.host.accepted.Load(), sum(drops), b.EgressStats())
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// TestEgressAllowlist: only listed names and CIDRs; DNS only for listed
// names; rebinding refused; the proxy dials the name, not the address.
func TestEgressAllowlist(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	policy := events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"Allowed.Test.", "*.wild.test", "rebind.test", "meta.test"}}
	id, out := createWith(t, b, policy, withImage(pythonImage))
	want := []string{"*.wild.test", "allowed.test", "meta.test", "rebind.test"}
	if out.Network == nil || !slices.Equal(out.Network.Allow, want) {
		t.Errorf("record network %+v, want allow %v", out.Network, want)
	}
	if !slices.Contains(b.Info().Capabilities, events.CapNetworkAllowlist) {
		t.Errorf("capabilities %v lack network_allowlist", b.Info().Capabilities)
	}
	ip := r.inet.ip.String()
	_, gw := sandboxAddr(t, b, id)
	// pyProbe connects to addr:port (TLS with sni when tls), sends payload
	// and prints the whole answer, or "refused" and why.
	pyProbe := func(addr string, port int, tls bool, sni, payload string) string {
		return probe(t, b, id, fmt.Sprintf(`python3 - <<'EOF'
import socket, ssl
try:
    s = socket.create_connection((%q, %d), timeout=3)
    if %s:
        c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
        s = c.wrap_socket(s, server_hostname=%q or None)
    s.sendall(%q.encode())
    out = b""
    while True:
        d = s.recv(4096)
        if not d: break
        out += d
    print(out.decode(errors="replace") if out else "refused empty")
except Exception as e:
    print("refused", type(e).__name__)
EOF`, addr, port, map[bool]string{true: "True", false: "False"}[tls], sni, payload))
	}
	cases := []struct {
		name      string
		addr      string
		port      int
		tls       bool
		sni, data string
		want      string
	}{
		{"listed name over http", "allowed.test", 80, false, "", "GET / HTTP/1.0\r\nHost: allowed.test\r\n\r\n", "hello allowed.test"},
		{"listed name, address given by the sandbox", ip, 80, false, "", "GET / HTTP/1.0\r\nHost: allowed.test\r\n\r\n", "hello allowed.test"},
		{"wildcard name", ip, 80, false, "", "GET / HTTP/1.0\r\nHost: a.b.wild.test\r\n\r\n", "hello a.b.wild.test"},
		{"listed name over tls", ip, 443, true, "allowed.test", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", "hello allowed.test"},
		{"CONNECT to a listed name", ip, 3128, false, "", "CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\nGET / HTTP/1.0\r\nHost: allowed.test\r\n\r\n", "hello allowed.test"},
		{"other name over http", ip, 80, false, "", "GET / HTTP/1.0\r\nHost: other.test\r\n\r\n", "403 Forbidden"},
		{"other name over tls", ip, 443, true, "other.test", "x", "refused"},
		{"CONNECT to another name", ip, 3128, false, "", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", "403 Forbidden"},
		{"CONNECT to a raw address", ip, 3128, false, "", "CONNECT " + ip + ":80 HTTP/1.1\r\nHost: " + ip + ":80\r\n\r\n", "403 Forbidden"},
		{"raw address, no name", ip, 80, false, "", "hi\r\n\r\n", "refused"},
		{"tls to a raw address, no sni", ip, 443, true, "", "x", "refused"},
		{"rebinding name by Host", ip, 80, false, "", "GET / HTTP/1.0\r\nHost: rebind.test\r\n\r\n", "403 Forbidden"},
		{"metadata name by Host", ip, 80, false, "", "GET / HTTP/1.0\r\nHost: meta.test\r\n\r\n", "403 Forbidden"},
		{"host listener via the outside address", r.hostIP.String(), r.host.port, false, "", "x", "refused"},
		{"host listener via the gateway", gw, r.host.port, false, "", "x", "refused"},
		{"gateway's resolver port over tcp, other name", gw, 53, false, "", "x", "refused"},
	}
	for _, c := range cases {
		got := pyProbe(c.addr, c.port, c.tls, c.sni, c.data)
		bad := !strings.Contains(got, c.want) || (!strings.HasPrefix(c.want, "hello") && strings.Contains(got, "hello")) || strings.Contains(got, "secret")
		if bad {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// UDP (a foreign resolver on :53, QUIC alike) is dropped unless a CIDR lists it.
	udpBefore := r.inet.udpHits.Load()
	if got := probe(t, b, id, fmt.Sprintf(`python3 -c '
import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"q", (%q, 53))
try: print(s.recv(100))
except Exception as e: print("refused", type(e).__name__)'`, ip)); !strings.Contains(got, "refused") {
		t.Errorf("udp to an unlisted address: %q", got)
	}
	if n := r.inet.udpHits.Load() - udpBefore; n != 0 {
		t.Errorf("foreign resolver got %d datagrams", n)
	}
	// DNS: listed names only; rebinding answers refused.
	dnsCases := map[string]string{"allowed.test": ip, "x.wild.test": ip}
	for name, want := range dnsCases {
		if got := probe(t, b, id, "python3 -c 'import socket,sys; print(socket.gethostbyname(sys.argv[1]))' "+name+" 2>&1"); got != want {
			t.Errorf("resolve %s: %q, want %s", name, got, want)
		}
	}
	for _, name := range []string{"other.test", "rebind.test", "meta.test", "loop.test"} {
		if got := probe(t, b, id, "python3 -c 'import socket,sys; print(socket.gethostbyname(sys.argv[1]))' "+name+" 2>&1"); !strings.Contains(got, "gaierror") {
			t.Errorf("resolve %s: %q, want a failure", name, got)
		}
	}
	if n := r.host.accepted.Load(); n != 0 {
		t.Errorf("host listener accepted %d connections", n)
	}
	c, _ := b.egress.mgr.SandboxStats(id)
	if c.ConnsAllowed < 4 || c.ConnsRefused < 5 || c.DNSRefused < 1 || c.DNSRebind < 1 {
		t.Errorf("counts %+v", c)
	}
	t.Logf("allowlist counts: connections allowed %d, refused %d; dns answered %d, refused (not listed) %d, rebinding refused %d; internet server hits %d",
		c.ConnsAllowed, c.ConnsRefused, c.DNSAnswered, c.DNSRefused, c.DNSRebind, r.inet.hits.Load())
}

// TestEgressAllowlistCIDR: a listed CIDR is reached directly (any
// protocol); an address outside it is not.
func TestEgressAllowlistCIDR(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	id, _ := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{r.inet.ip.String() + "/32"}})
	if got := probe(t, b, id, "echo hi | nc -w 3 "+r.inet.ip.String()+" 80"); !strings.Contains(got, "400 Bad Request") {
		t.Errorf("listed CIDR (raw bytes to :80): %q", got)
	}
	if got := probe(t, b, id, httpGet("anything.example", r.inet.ip.String())); !strings.Contains(got, "hello anything.example") {
		t.Errorf("listed CIDR with any Host: %q", got)
	}
	udpBefore := r.inet.udpHits.Load()
	probe(t, b, id, "timeout 3 nslookup x.test "+r.inet.ip.String()+" 2>&1")
	if r.inet.udpHits.Load() == udpBefore {
		t.Errorf("udp to a listed CIDR did not arrive")
	}
	if got := probe(t, b, id, fmt.Sprintf("nc -w 2 %s %d </dev/null; echo rc=$?", r.inet.hostIP, r.host.port)); strings.Contains(got, "host secret") {
		t.Errorf("unlisted host address reached: %q", got)
	}
}

// TestEgressPolicyRefused: what cannot be validated or enforced is refused
// before anything is created, with its code.
func TestEgressPolicyRefused(t *testing.T) {
	t.Parallel()
	needEgressHost(t)
	wid := randID("test-")
	dropEgressTable(t, wid)
	b := newTestBackend(t, Config{WorkerID: wid, Egress: EgressConfig{MaxEntries: 3}})
	cases := []struct {
		allow []string
		code  events.Code
	}{
		{[]string{"exa mple.com"}, events.CodeEgressInvalidEntry},
		{[]string{"localhost"}, events.CodeEgressInvalidEntry},
		{[]string{"0x7f.1"}, events.CodeEgressInvalidEntry},
		{[]string{"1.2.3.4.5"}, events.CodeEgressInvalidEntry},
		{[]string{"a.com", "b.com", "c.com", "d.com"}, events.CodeEgressTooManyEntries},
		{[]string{"0.0.0.0/0"}, events.CodeEgressCIDRTooBroad},
		{[]string{"2001:db8::/32"}, events.CodeEgressIPv6Unsupported},
		{[]string{"127.0.0.1"}, events.CodeEgressCIDRForbidden},
		{[]string{"10.213.0.0/24"}, events.CodeEgressCIDRForbidden},
	}
	for _, c := range cases {
		spec := newSpec(withNetwork(events.NetworkPolicy{Egress: events.EgressAllow, Allow: c.allow}))
		_, err := b.Create(context.Background(), spec)
		var e *events.Error
		if !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("allow %v: %v, want %s", c.allow, err, c.code)
		}
		if n, _ := b.cli.(egress.Docker).NetworkList(context.Background(), networkByName(egress.NetworkPrefix+spec.SandboxID)); len(n) != 0 {
			t.Errorf("allow %v left a network", c.allow)
		}
	}
}

// TestEgressCleanup: kill removes the network, the rules and the
// resolv.conf; a restarted worker takes live sandboxes back (resolver,
// proxy, rules) and a sandbox whose container is gone loses its network.
func TestEgressCleanup(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	policy := events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"allowed.test"}}
	id, _ := createWith(t, b, policy)
	key := egress.Key(id)
	table := egress.TableName(b.cfg.WorkerID)
	if out := nftList(t, table); !strings.Contains(out, "in_"+key) || !strings.Contains(out, "redirect") ||
		!strings.Contains(out, `iifname "`+egress.BridgePrefix(b.cfg.WorkerID)+`*"`) {
		t.Fatalf("rules missing (sandbox chains, redirect, fail-closed prefix drop):\n%s", out)
	}

	// Restart: a new backend with the same worker id.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := b.cfg
	b2, err := NewBackend(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if got := probe(t, b2, id, httpGet("allowed.test", "allowed.test")); !strings.Contains(got, "hello allowed.test") {
		t.Errorf("after restart: %q", got)
	}
	if got := probe(t, b2, id, httpGet("other.test", r.inet.ip.String())); !strings.Contains(got, "403") {
		t.Errorf("after restart, other name: %q", got)
	}
	if err := b2.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	if out := nftList(t, table); strings.Contains(out, key) {
		t.Errorf("rules left after kill:\n%s", out)
	}
	if n, _ := b2.cli.(egress.Docker).NetworkList(ctx, networkByName(egress.NetworkPrefix+id)); len(n) != 0 {
		t.Errorf("network left after kill: %v", n)
	}
	if _, err := os.Stat(b2.cfg.Egress.StateDir); err == nil {
		entries, _ := os.ReadDir(b2.cfg.Egress.StateDir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), id) {
				t.Errorf("resolv.conf left: %s", e.Name())
			}
		}
	}
}

func nftList(t *testing.T, table string) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "table", "inet", table).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file") {
			return "" // the table goes with the worker's last sandbox network
		}
		t.Fatalf("nft list: %v %s", err, out)
	}
	return string(out)
}

// TestEgressGVisor: allow and allowlists on gVisor, through its own
// network stack: the runtime runsc-net that deploy/images/gvisor.sh
// registers beside a runsc registered with --network=none, where a probe
// container starts with it (the go-branch build; Debian's 2022 runsc fails
// the probe, and then both are refused with CapabilityNotSupported).
func TestEgressGVisor(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	if _, ok := b.RuntimeTier(RuntimeRunsc); !ok {
		t.Skip("runsc is not registered with this docker daemon")
	}
	info, err := b.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, hasNet := info.Runtimes[RuntimeRunscNet]
	runsc := func(s *worker.CreateSpec) { s.Spec.Runtime = RuntimeRunsc }
	if b.egress.runscNet != "" {
		if hasNet {
			t.Fatalf("the daemon has %s, yet egress on runsc is refused: %s", RuntimeRunscNet, b.egress.runscNet)
		}
		spec := newSpec(runsc, withNetwork(events.NetworkPolicy{Egress: events.EgressAllow}))
		if _, err := b.Create(context.Background(), spec); !errors.Is(err, events.ErrCapabilityNotSupported) {
			t.Fatalf("%s: allow on runsc: %v, want CapabilityNotSupported", b.egress.runscNet, err)
		}
		t.Skipf("egress on gVisor needs a runsc with its own network stack (SBX_RUNSC_BUILD=1 deploy/images/gvisor.sh): %s", b.egress.runscNet)
	}
	a, _ := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow}, runsc)
	if ins, err := b.cli.ContainerInspect(context.Background(), namePrefix+a); err != nil || ins.HostConfig.Runtime != b.egress.runscNetRuntime {
		t.Errorf("runsc allow sandbox: runtime %v (%v), want %s", ins.HostConfig, err, b.egress.runscNetRuntime)
	}
	if got := probe(t, b, a, "dmesg | head -1"); !strings.Contains(got, "gVisor") {
		t.Errorf("runsc allow sandbox is not on gVisor: %q", got)
	}
	if got := probe(t, b, a, httpGet("allowed.test", r.inet.ip.String())); !strings.Contains(got, "hello allowed.test") {
		t.Errorf("runsc allow, internet: %q", got)
	}
	refused := 0
	_, gw := sandboxAddr(t, b, a)
	for _, dst := range []string{gw, r.hostIP.String()} {
		if got := probe(t, b, a, fmt.Sprintf("nc -w 2 %s %d </dev/null; echo rc=$?", dst, r.host.port)); strings.Contains(got, "host secret") {
			t.Errorf("runsc allow reached the host via %s", dst)
		} else {
			refused++
		}
	}
	l, _ := createWith(t, b, events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"allowed.test"}}, runsc)
	if got := probe(t, b, l, httpGet("allowed.test", "allowed.test")); !strings.Contains(got, "hello allowed.test") {
		t.Errorf("runsc allowlist, listed name: %q", got)
	}
	if got := probe(t, b, l, httpGet("other.test", r.inet.ip.String())); !strings.Contains(got, "403") {
		t.Errorf("runsc allowlist, other name: %q", got)
	} else {
		refused++
	}
	if got := probe(t, b, l, "nslookup other.test 2>&1; echo rc=$?"); strings.Contains(got, r.inet.ip.String()) {
		t.Errorf("runsc allowlist resolved an unlisted name: %q", got)
	} else {
		refused++
	}
	if n := r.host.accepted.Load(); n != 0 {
		t.Errorf("host listener accepted %d", n)
	}
	cnt, _ := b.egress.mgr.SandboxStats(l)
	t.Logf("gVisor (%s) egress: %d forbidden destinations refused; allowlist counts %+v", b.egress.runscNetRuntime, refused, cnt)
}

// TestEgressKillDuringCreate: a kill that arrives while the network is being
// made leaves no network, rules or container behind.
func TestEgressKillDuringCreate(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	b := r.b
	for i := range 3 {
		spec := newSpec(withNetwork(events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"allowed.test"}}))
		done := make(chan error, 1)
		go func() {
			_, err := b.Create(context.Background(), spec)
			done <- err
		}()
		time.Sleep(time.Duration(i*40) * time.Millisecond) // vary where the kill lands
		if err := b.Kill(context.Background(), spec.SandboxID); err != nil {
			t.Fatal(err)
		}
		createErr := <-done
		if createErr == nil {
			// The create won the race: kill it now, as the worker would.
			if err := b.Kill(context.Background(), spec.SandboxID); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 20*time.Second, "no network left", func() bool {
			n, err := b.cli.(egress.Docker).NetworkList(context.Background(), networkByName(egress.NetworkPrefix+spec.SandboxID))
			return err == nil && len(n) == 0
		})
		if out := nftList(t, egress.TableName(b.cfg.WorkerID)); strings.Contains(out, egress.Key(spec.SandboxID)) {
			t.Errorf("rules left for %s:\n%s", spec.SandboxID, out)
		}
		t.Logf("kill after %d ms: create returned %v", i*40, createErr)
	}
}

// TestEgressDeadWorkersSandbox: a worker that removes a sandbox another
// worker left behind (gone for good) removes its network, its rules from
// that worker's table (the table too, when empty) and its resolv.conf.
func TestEgressDeadWorkersSandbox(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	dead := r.b
	id, _ := createWith(t, dead, events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"allowed.test"}})
	deadTable := egress.TableName(dead.cfg.WorkerID)
	if err := dead.Close(); err != nil { // gone, leaving its sandbox, network and table
		t.Fatal(err)
	}
	if out := nftList(t, deadTable); !strings.Contains(out, egress.Key(id)) {
		t.Fatalf("the dead worker's rules should still be there:\n%s", out)
	}
	wid := randID("test-")
	dropEgressTable(t, wid)
	other := newTestBackend(t, Config{WorkerID: wid})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := other.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n, _ := other.cli.(egress.Docker).NetworkList(ctx, networkByName(egress.NetworkPrefix+id)); len(n) != 0 {
		t.Errorf("network left: %v", n)
	}
	if out := nftList(t, deadTable); out != "" {
		t.Errorf("the dead worker's table is left:\n%s", out)
	}
}

// TestEgressSweep: a sandbox network whose container went away without a
// kill (removed by hand, a gone worker's) is removed by the sweep, with its
// rules and the gone worker's table.
func TestEgressSweep(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	dead := r.b
	id, _ := createWith(t, dead, events.NetworkPolicy{Egress: events.EgressAllow})
	deadTable := egress.TableName(dead.cfg.WorkerID)
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dead.cli.ContainerRemove(ctx, namePrefix+id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	wid := randID("test-")
	dropEgressTable(t, wid)
	other := newTestBackend(t, Config{WorkerID: wid})
	// Only the gone worker's networks: other tests' creates are in flight.
	n, err := other.egress.mgr.Sweep(ctx, 0, 32, dead.cfg.WorkerID)
	if err != nil || n < 1 {
		t.Fatalf("sweep removed %d: %v", n, err)
	}
	if l, _ := other.cli.(egress.Docker).NetworkList(ctx, networkByName(egress.NetworkPrefix+id)); len(l) != 0 {
		t.Errorf("network left: %v", l)
	}
	if out := nftList(t, deadTable); out != "" {
		t.Errorf("the gone worker's table is left:\n%s", out)
	}
}
