package modalfake

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/internal/fakejail"
	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
)

// A sandbox's network_access is enforced as Modal enforces it, where the
// host allows network namespaces (the chroot jail, as root): every exec of
// a BLOCKED or ALLOWLIST sandbox runs in the sandbox's own network
// namespace.
//   - BLOCKED: the namespace has only its loopback: "drops all outbound
//     traffic".
//   - ALLOWLIST: a veth pair to the host (HostNet, a /30 out of
//     198.18.0.0/15, the host's end is SandboxInfo.HostAddr, the default
//     route) and an OUTPUT filter in the namespace: allowed_cidrs with any
//     protocol; allowed_domains as TCP port 443 to the addresses the name
//     resolves to when the sandbox is created (Modal matches TLS by SNI);
//     DNS stays open; an empty list blocks all egress.
//   - OPEN: the host's network.
// Elsewhere (user namespaces only, or none) the policy is recorded and not
// enforced: NetworkEnforced reports which.

// HostNet is the range the fake takes the veth addresses of ALLOWLIST
// sandboxes from.
const HostNet = "198.18.0.0/15"

// NetworkEnforced reports whether this host lets the fake enforce network
// policies.
func NetworkEnforced() bool { return DetectJail() == fakejail.Chroot }

// sandboxNet is the network namespace of one sandbox, held by a process.
type sandboxNet struct {
	holder   *exec.Cmd
	done     chan struct{} // closed when the holder was reaped
	nsPath   string
	hostAddr string // the host's end of the veth (ALLOWLIST only)
}

// newNet builds the namespace a policy needs; nil for OPEN or where
// policies are not enforced.
func newNet(ctx context.Context, na *pb.NetworkAccess) (*sandboxNet, error) {
	t := na.GetNetworkAccessType()
	if !NetworkEnforced() || t != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED && t != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_ALLOWLIST {
		return nil, nil
	}
	n, err := holdNamespace()
	if err != nil {
		return nil, err
	}
	err = n.in(ctx, "ip", "link", "set", "lo", "up")
	if err == nil && t == pb.NetworkAccessType_NETWORK_ACCESS_TYPE_ALLOWLIST {
		err = n.allowlist(ctx, na)
	}
	if err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// holdNamespace starts a process in a new network namespace and waits,
// bounded, until it is in it.
func holdNamespace() (*sandboxNet, error) {
	cmd := exec.Command("unshare", "--net", "--", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	n := &sandboxNet{holder: cmd, done: make(chan struct{}), nsPath: "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"}
	go func() { _ = cmd.Wait(); close(n.done) }() // owned by close, which waits for it
	self, _ := os.Readlink("/proc/self/ns/net")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if ns, err := os.Readlink(n.nsPath); err == nil && ns != self {
			return n, nil
		}
		if time.Now().After(deadline) {
			n.close()
			return nil, errors.New("network namespace: the holder never entered it")
		}
		time.Sleep(5 * time.Millisecond) // unshare is about to exec sleep, bounded above
	}
}

// allowlist connects the namespace to the host by a veth pair and filters
// what leaves it.
func (n *sandboxNet) allowlist(ctx context.Context, na *pb.NetworkAccess) error {
	var r [6]byte
	_, _ = rand.Read(r[:])
	block := binary.BigEndian.Uint32([]byte{0, 0, r[0], r[1]}) & 0x7fff // 2^15 /30 blocks of 198.18.0.0/15
	base := 198<<24 | 18<<16 | block<<2
	host, sb := ip4(base+1), ip4(base+2)
	vh, vs := fmt.Sprintf("mfh%x", r[2:]), fmt.Sprintf("mfs%x", r[2:])
	pid := strconv.Itoa(n.holder.Process.Pid)
	steps := [][]string{
		{"ip", "link", "add", vh, "type", "veth", "peer", "name", vs},
		{"ip", "link", "set", vs, "netns", pid},
		{"ip", "addr", "add", host + "/30", "dev", vh},
		{"ip", "link", "set", vh, "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	n.hostAddr = host
	inside := [][]string{
		{"ip", "addr", "add", sb + "/30", "dev", vs},
		{"ip", "link", "set", vs, "up"},
		{"ip", "route", "add", "default", "via", host},
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		inside = append(inside,
			[]string{fam, "-w", "-P", "OUTPUT", "DROP"},
			[]string{fam, "-w", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"},
			[]string{fam, "-w", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			[]string{fam, "-w", "-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", "ACCEPT"},
			[]string{fam, "-w", "-A", "OUTPUT", "-p", "tcp", "--dport", "53", "-j", "ACCEPT"})
	}
	for _, c := range na.GetAllowedCidrs() {
		inside = append(inside, []string{family(c), "-w", "-A", "OUTPUT", "-d", c, "-j", "ACCEPT"})
	}
	for _, d := range na.GetAllowedDomains() {
		addrs, _ := net.DefaultResolver.LookupHost(ctx, strings.TrimPrefix(d, "*."))
		for _, a := range addrs {
			inside = append(inside, []string{family(a), "-w", "-A", "OUTPUT", "-p", "tcp", "--dport", "443", "-d", a, "-j", "ACCEPT"})
		}
	}
	for _, s := range inside {
		if err := n.in(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

func family(addr string) string {
	if strings.Contains(addr, ":") {
		return "ip6tables"
	}
	return "iptables"
}

func ip4(v uint32) string {
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String()
}

func run(ctx context.Context, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// in runs a command inside the namespace.
func (n *sandboxNet) in(ctx context.Context, argv ...string) error {
	return run(ctx, append([]string{"nsenter", "--net=" + n.nsPath, "--"}, argv...)...)
}

// wrap makes cmd run inside the namespace.
func (n *sandboxNet) wrap(cmd *exec.Cmd) {
	if n == nil {
		return
	}
	path, err := exec.LookPath("nsenter")
	if err != nil {
		path = "nsenter"
	}
	cmd.Args = append([]string{"nsenter", "--net=" + n.nsPath, "--"}, cmd.Args...)
	cmd.Path = path
	cmd.Err = nil
}

// close ends the holder (the namespace and its veth go with it) and waits,
// bounded, for it.
func (n *sandboxNet) close() {
	if n == nil {
		return
	}
	_ = n.holder.Process.Kill()
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
	}
}

// addr is the host's end of the veth, if any.
func (n *sandboxNet) addr() string {
	if n == nil {
		return ""
	}
	return n.hostAddr
}
