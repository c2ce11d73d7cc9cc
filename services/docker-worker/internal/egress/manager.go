package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"golang.org/x/time/rate"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// ErrFirewall wraps a failure to write the worker's nftables table: allow
// and allowlist cannot be enforced on this host.
var ErrFirewall = errors.New("egress: host firewall unavailable")

// Labels on the networks the manager creates.
const (
	LabelWorker  = "io.sandboxio.worker"
	LabelSandbox = "io.sandboxio.sandbox"
	LabelPolicy  = "io.sandboxio.egress" // the policy, JSON, to restore after a restart
)

// NetworkPrefix names each sandbox's Docker network: NetworkPrefix+id.
const NetworkPrefix = "sbx-net-"

// Docker is the part of the Docker API the manager uses.
type Docker interface {
	NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkRemove(ctx context.Context, networkID string) error
	NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	NetworkInspect(ctx context.Context, networkID string, options network.InspectOptions) (network.Inspect, error)
}

// Config configures a Manager.
type Config struct {
	WorkerID string
	// Pool is where sandbox subnets (/29 each) come from. Default
	// 10.213.0.0/16 (8192 sandboxes).
	Pool netip.Prefix
	// Deny are ranges no sandbox may reach besides the built-in ones (the
	// operator's private networks).
	Deny []netip.Prefix
	// AllowMetadata lets sandboxes reach link-local and cloud metadata
	// addresses (Metadata) like any other private range: only when listed
	// (allowlist) and, for Azure's public wire server, under allow. Off by
	// default: no sandbox reaches them.
	AllowMetadata bool
	// Upstreams are the resolvers (host:port) the worker asks for the
	// sandboxes. Default: the nameservers of /etc/resolv.conf.
	Upstreams []string
	// Limits bound the allowlists.
	Limits Limits
	// StateDir holds each sandbox's resolv.conf. Default
	// /run/sandboxio/egress/<worker>.
	StateDir string
	Logger   *slog.Logger
}

// Manager owns the worker's sandbox networks, host rules, resolvers and
// proxies.
type Manager struct {
	cfg    Config
	docker Docker
	fw     *firewall
	never  []netip.Prefix
	up     upstream
	log    *slog.Logger
	stats  Stats

	mu       sync.Mutex
	attached map[string]*attachment // by sandbox id
	used     map[int]string         // subnet index -> sandbox id
}

// attachment is one sandbox's live egress machinery.
type attachment struct {
	id      string
	index   int
	rules   rules
	dns     *dnsServers
	proxy   *proxy
	stats   Stats
	network string
	resolv  string
	ready   bool // Attach finished (guarded by Manager.mu)
}

// Attachment is what a container needs to join its network.
type Attachment struct {
	Network    string     // Docker network name
	ResolvConf string     // host file to bind at /etc/resolv.conf
	Gateway    netip.Addr // the sandbox's resolver (and proxy) address
	Policy     Policy
}

// New checks that the host firewall can be written (root, nftables) and
// returns a Manager. It writes the worker's (empty) table: call Reconcile
// next to restore live sandboxes.
func New(cfg Config, docker Docker) (*Manager, error) {
	if !events.ValidID(cfg.WorkerID) {
		return nil, fmt.Errorf("egress: worker id %q is not valid", cfg.WorkerID)
	}
	if !cfg.Pool.IsValid() {
		cfg.Pool = netip.MustParsePrefix("10.213.0.0/16")
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 29 {
		return nil, fmt.Errorf("egress: pool %s must be an IPv4 prefix of /29 or wider", cfg.Pool)
	}
	cfg.Pool = cfg.Pool.Masked()
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join("/run/sandboxio/egress", cfg.WorkerID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Upstreams) == 0 {
		cfg.Upstreams = systemResolvers("/etc/resolv.conf")
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("egress: state dir: %w", err)
	}
	m := &Manager{cfg: cfg, docker: docker, log: cfg.Logger.With("component", "egress"),
		up:       upstream{servers: cfg.Upstreams, timeout: 2 * time.Second},
		attached: make(map[string]*attachment), used: make(map[int]string)}
	m.never = append(append(NeverRanges(cfg.AllowMetadata), cfg.Pool), cfg.Deny...)
	m.never = append(m.never, hostPrefixes()...)
	m.fw = newFirewall(TableName(cfg.WorkerID), BridgePrefix(cfg.WorkerID), m.never)
	return m, nil
}

// Never is every range no sandbox of this worker reaches.
func (m *Manager) Never() []netip.Prefix { return m.never }

// Limits are the allowlist bounds in force.
func (m *Manager) Limits() Limits { return m.cfg.Limits }

// Stats are the manager's totals over every sandbox, live and gone.
func (m *Manager) Stats() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.stats.Snapshot()
	for _, a := range m.attached {
		s := a.stats.Snapshot()
		c.ConnsAllowed += s.ConnsAllowed
		c.ConnsRefused += s.ConnsRefused
		c.DNSAnswered += s.DNSAnswered
		c.DNSRefused += s.DNSRefused
		c.DNSRebind += s.DNSRebind
		c.NamesCapped += s.NamesCapped
	}
	return c
}

// SandboxStats are one live sandbox's counters.
func (m *Manager) SandboxStats(id string) (Counts, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.attached[id]
	if a == nil {
		return Counts{}, false
	}
	return a.stats.Snapshot(), true
}

// DropCounts are the packets the host rules dropped, per sandbox id ("" for
// the worker's fail-closed rules).
func (m *Manager) DropCounts() (map[string]uint64, error) {
	byKey, err := m.fw.dropCounts()
	out := make(map[string]uint64, len(byKey))
	for k, n := range byKey {
		out[k] += n
	}
	return out, err
}

// TableName is the worker's nftables table (family inet).
func TableName(workerID string) string { return "sandboxio_" + workerID }

// BridgePrefix starts the Linux bridge name of every sandbox network of a
// worker ("sbx" and 4 hex digits of the worker id's hash).
func BridgePrefix(workerID string) string { return "sbx" + hash(workerID)[:4] }

// Key is the short name of a sandbox's chains, and its bridge's suffix.
func Key(sandboxID string) string { return hash(sandboxID)[:8] }

func hash(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// Attach creates the sandbox's network, installs its host rules, starts its
// resolver (and proxy, for an allowlist) and writes its resolv.conf, in that
// order; the rules are read back before it returns. On error nothing is
// left. Deny needs no attachment.
func (m *Manager) Attach(ctx context.Context, sandboxID string, p Policy) (Attachment, error) {
	if p.Mode == ModeDeny {
		return Attachment{}, errors.New("egress: deny has no network")
	}
	key := Key(sandboxID)
	m.mu.Lock()
	if _, ok := m.attached[sandboxID]; ok {
		m.mu.Unlock()
		return Attachment{}, events.Errorf(events.CodeSandboxExists, "sandbox %s already has a network", sandboxID)
	}
	for _, a := range m.attached {
		if a.rules.key == key {
			m.mu.Unlock()
			return Attachment{}, events.Errorf(events.CodeEgressSetupFailed, "sandbox %s: network key collision; retry with another id", sandboxID)
		}
	}
	// Reserve the id so a concurrent Attach of it fails fast.
	a := &attachment{id: sandboxID, index: -1, network: NetworkPrefix + sandboxID}
	m.attached[sandboxID] = a
	m.mu.Unlock()

	ok := false
	defer func() {
		if !ok {
			m.teardown(context.WithoutCancel(ctx), a)
		}
	}()
	t0 := time.Now()
	gw, err := m.createNetwork(ctx, a, p)
	if err != nil {
		return Attachment{}, err
	}
	t1 := time.Now()
	if err := m.start(a, gw, p); err != nil {
		return Attachment{}, err
	}
	if err := m.fw.set(a.rules); err != nil {
		return Attachment{}, fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "host rules for sandbox %s", sandboxID), err)
	}
	if err := m.fw.verify(key); err != nil {
		return Attachment{}, fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "host rules for sandbox %s", sandboxID), err)
	}
	m.mu.Lock()
	current := m.attached[sandboxID] == a
	a.ready = current
	m.mu.Unlock()
	m.log.Debug("sandbox network attached", "sandbox_id", sandboxID, "mode", p.Mode,
		"network_ms", t1.Sub(t0).Milliseconds(), "rules_and_listeners_ms", time.Since(t1).Milliseconds())
	if !current {
		// A Detach (a kill) ran while we worked: undo what we made.
		return Attachment{}, events.Errorf(events.CodeSandboxGone, "sandbox %s was killed while its network was made", sandboxID)
	}
	ok = true
	return Attachment{Network: a.network, ResolvConf: a.resolv, Gateway: gw, Policy: p}, nil
}

// start brings up the resolver, the proxy and the resolv.conf of a and
// fills a.rules.
func (m *Manager) start(a *attachment, gw netip.Addr, p Policy) error {
	a.rules = rules{key: Key(a.id), bridge: BridgePrefix(m.cfg.WorkerID) + Key(a.id), gateway: gw, policy: p}
	var err error
	names := new(nameGuard) // shared: a name looked up by either counts once
	a.dns, err = startDNS(gw, &resolver{policy: p, never: m.never, up: m.up, stats: &a.stats,
		limit: rate.NewLimiter(dnsRate, dnsBurst), names: names})
	if err != nil {
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "resolver for sandbox %s", a.id), err)
	}
	if p.Mode == ModeAllowlist {
		a.proxy, err = startProxy(gw, p, m.never, m.up, &a.stats, names, m.log.With("sandbox_id", a.id))
		if err != nil {
			return fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "proxy for sandbox %s", a.id), err)
		}
		a.rules.proxyPort = a.proxy.port()
	}
	a.resolv = filepath.Join(m.cfg.StateDir, a.id+".resolv.conf")
	if err := os.WriteFile(a.resolv, []byte("nameserver "+gw.String()+"\noptions ndots:0 attempts:2 timeout:2\n"), 0o644); err != nil {
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "resolv.conf for sandbox %s", a.id), err)
	}
	return nil
}

// createNetwork makes the sandbox's bridge network on the first free /29
// of the pool: inter-container traffic off, masquerade on, no IPv6.
func (m *Manager) createNetwork(ctx context.Context, a *attachment, p Policy) (netip.Addr, error) {
	pol, _ := json.Marshal(p.Record())
	n := 1 << (29 - m.cfg.Pool.Bits())
	for tries := 0; tries < 32; tries++ {
		idx := m.reserveIndex(a.id, n)
		if idx < 0 {
			return netip.Addr{}, events.Errorf(events.CodeEgressSubnetsExhausted, "all %d sandbox subnets of %s are in use", n, m.cfg.Pool)
		}
		a.index = idx
		subnet, gw := subnetAt(m.cfg.Pool, idx)
		no := false
		_, err := m.docker.NetworkCreate(ctx, a.network, network.CreateOptions{
			Driver:     "bridge",
			EnableIPv6: &no,
			IPAM:       &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: subnet.String(), Gateway: gw.String()}}},
			Options: map[string]string{
				"com.docker.network.bridge.name":                 BridgePrefix(m.cfg.WorkerID) + Key(a.id),
				"com.docker.network.bridge.enable_icc":           "false",
				"com.docker.network.bridge.enable_ip_masquerade": "true",
				"com.docker.network.driver.mtu":                  "1400",
			},
			Labels: map[string]string{LabelWorker: m.cfg.WorkerID, LabelSandbox: a.id, LabelPolicy: string(pol)},
		})
		if err == nil {
			return gw, nil
		}
		if cerrdefs.IsPermissionDenied(err) {
			// Another worker (or network) holds this subnet: keep the index
			// marked and try the next.
			m.mu.Lock()
			m.used[idx] = "(taken)"
			m.mu.Unlock()
			a.index = -1
			continue
		}
		if cerrdefs.IsConflict(err) {
			return netip.Addr{}, events.Errorf(events.CodeSandboxExists, "sandbox %s already has a network", a.id)
		}
		m.releaseIndex(idx)
		a.index = -1
		return netip.Addr{}, fmt.Errorf("%w: %w", events.Errorf(events.CodeEgressSetupFailed, "network for sandbox %s", a.id), err)
	}
	return netip.Addr{}, events.Errorf(events.CodeEgressSubnetsExhausted, "no free sandbox subnet in %s", m.cfg.Pool)
}

func (m *Manager) reserveIndex(id string, n int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; i < n; i++ {
		if _, ok := m.used[i]; !ok {
			m.used[i] = id
			return i
		}
	}
	return -1
}

func (m *Manager) releaseIndex(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.used, i)
}

func subnetAt(pool netip.Prefix, idx int) (netip.Prefix, netip.Addr) {
	b := pool.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(idx) * 8
	a := netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)})
	g := netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base) + 1})
	return netip.PrefixFrom(a, 29), g
}

func indexOf(pool netip.Prefix, subnet netip.Prefix) (int, bool) {
	if !pool.Contains(subnet.Addr()) || subnet.Bits() != 29 {
		return 0, false
	}
	p, s := pool.Addr().As4(), subnet.Addr().As4()
	pu := uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3])
	su := uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
	return int((su - pu) / 8), true
}

// Detach removes what Attach made for the sandbox, after its container is
// gone: resolver and proxy, host rules, network, resolv.conf. A sandbox it
// does not know (after a restart, or another worker's) is looked up by name.
func (m *Manager) Detach(ctx context.Context, sandboxID string) error {
	m.mu.Lock()
	a := m.attached[sandboxID]
	if a != nil && !a.ready {
		// Attach is still at work: it sees the id gone and undoes it all.
		delete(m.attached, sandboxID)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	if a == nil {
		a = &attachment{id: sandboxID, index: -1, network: NetworkPrefix + sandboxID,
			rules: rules{key: Key(sandboxID)}, resolv: filepath.Join(m.cfg.StateDir, sandboxID+".resolv.conf")}
		// Another worker's sandbox (one that is gone for good): its rules
		// are in that worker's table, its resolv.conf in its directory.
		if ins, err := m.docker.NetworkInspect(ctx, a.network, network.InspectOptions{}); err == nil {
			if w := ins.Labels[LabelWorker]; w != m.cfg.WorkerID && events.ValidID(w) && ins.Labels[LabelSandbox] == sandboxID {
				err := m.teardown(ctx, a)
				return errors.Join(err, m.removeForeign(w, sandboxID))
			}
		}
	}
	return m.teardown(ctx, a)
}

// Sweep removes sandbox networks of any worker on this daemon that have no
// container and are older than grace (a create makes the network first),
// skipping the sandboxes this manager is attaching or holds; at most max a
// call; workerID, when set, limits it to that worker's networks. It returns
// how many it removed.
func (m *Manager) Sweep(ctx context.Context, grace time.Duration, max int, workerID string) (int, error) {
	label := LabelWorker
	if workerID != "" {
		label += "=" + workerID
	}
	list, err := m.docker.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return 0, fmt.Errorf("egress: list networks: %w", err)
	}
	removed := 0
	var errs []error
	for _, n := range list {
		id := n.Labels[LabelSandbox]
		if removed >= max || ctx.Err() != nil {
			break
		}
		if !events.ValidID(id) || n.Name != NetworkPrefix+id || time.Since(n.Created) < grace {
			continue
		}
		m.mu.Lock()
		_, mine := m.attached[id]
		m.mu.Unlock()
		if mine {
			continue // a live sandbox of ours: its kill removes it
		}
		ins, err := m.docker.NetworkInspect(ctx, n.ID, network.InspectOptions{})
		if err != nil || len(ins.Containers) > 0 {
			continue
		}
		if err := m.Detach(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// removeForeign removes a sandbox's rules from another worker's table (and
// the table when no sandbox is left in it) and its resolv.conf.
func (m *Manager) removeForeign(workerID, sandboxID string) error {
	f := newFirewall(TableName(workerID), BridgePrefix(workerID), nil)
	var errs []error
	if f.tableExists() {
		if err := f.del(Key(sandboxID)); err != nil {
			errs = append(errs, err)
		} else if n, err := f.sandboxChains(); err == nil && n == 0 {
			errs = append(errs, f.drop())
		}
	}
	dir := filepath.Join(filepath.Dir(m.cfg.StateDir), workerID)
	if err := os.Remove(filepath.Join(dir, sandboxID+".resolv.conf")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	_ = os.Remove(dir) // only when empty
	return errors.Join(errs...)
}

func (m *Manager) teardown(ctx context.Context, a *attachment) error {
	if a.proxy != nil {
		a.proxy.stop()
	}
	if a.dns != nil {
		a.dns.stop()
	}
	var errs []error
	if err := m.removeNetwork(ctx, a.network); err != nil {
		errs = append(errs, err)
	}
	// Rules go after the network: until then the bridge stays filtered.
	if err := m.fw.remove(Key(a.id)); err != nil {
		errs = append(errs, err)
	}
	if a.resolv != "" {
		if err := os.Remove(a.resolv); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	if m.attached[a.id] == a {
		delete(m.attached, a.id)
	}
	if a.index >= 0 && m.used[a.index] == a.id {
		delete(m.used, a.index)
	}
	m.stats.add(a.stats.Snapshot())
	m.mu.Unlock()
	return errors.Join(errs...)
}

// removeNetwork removes a network, retrying while the daemon still sees the
// just-removed container's endpoint.
func (m *Manager) removeNetwork(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		err := m.docker.NetworkRemove(ctx, name)
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("egress: remove network %s: %w", name, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// Reconcile runs at startup: every network of this worker with a container
// still attached gets its resolver, proxy and rules back; the others are
// removed. The table is recreated for exactly the live ones, so rules of
// sandboxes that died while the worker was down go too.
func (m *Manager) Reconcile(ctx context.Context) error {
	list, err := m.docker.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelWorker+"="+m.cfg.WorkerID))})
	if err != nil {
		return fmt.Errorf("egress: list networks: %w", err)
	}
	var live []rules
	var errs []error
	for _, n := range list {
		id := n.Labels[LabelSandbox]
		if !events.ValidID(id) || n.Name != NetworkPrefix+id {
			continue
		}
		ins, err := m.docker.NetworkInspect(ctx, n.ID, network.InspectOptions{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a, err := m.restore(id, ins)
		if err != nil {
			m.log.Warn("remove sandbox network", "sandbox_id", id, slog.Any("reason", err))
			if err := m.removeNetwork(ctx, n.ID); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		live = append(live, a.rules)
	}
	if err := m.fw.replace(live); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrFirewall, err))
	}
	m.log.Info("egress reconciled", "live", len(live), "networks", len(list))
	return errors.Join(errs...)
}

func (m *Manager) restore(id string, ins network.Inspect) (*attachment, error) {
	if len(ins.Containers) == 0 {
		return nil, errors.New("no container attached")
	}
	var rec events.NetworkPolicy
	if err := json.Unmarshal([]byte(ins.Labels[LabelPolicy]), &rec); err != nil {
		return nil, fmt.Errorf("policy label: %w", err)
	}
	p, err := Parse(rec, m.cfg.Limits, m.never)
	if err != nil {
		return nil, fmt.Errorf("policy label: %w", err)
	}
	if p.Mode == ModeDeny {
		return nil, errors.New("policy label says deny")
	}
	if len(ins.IPAM.Config) != 1 {
		return nil, errors.New("network has no single subnet")
	}
	subnet, err := netip.ParsePrefix(ins.IPAM.Config[0].Subnet)
	if err != nil {
		return nil, err
	}
	gw, err := netip.ParseAddr(ins.IPAM.Config[0].Gateway)
	if err != nil {
		return nil, err
	}
	a := &attachment{id: id, index: -1, network: ins.Name, ready: true}
	if idx, ok := indexOf(m.cfg.Pool, subnet); ok {
		a.index = idx
	}
	m.mu.Lock()
	m.attached[id] = a
	if a.index >= 0 {
		m.used[a.index] = id
	}
	m.mu.Unlock()
	if err := m.start(a, gw, p); err != nil {
		_ = m.teardownListeners(a)
		m.mu.Lock()
		delete(m.attached, id)
		m.mu.Unlock()
		return nil, err
	}
	return a, nil
}

func (m *Manager) teardownListeners(a *attachment) error {
	if a.proxy != nil {
		a.proxy.stop()
	}
	if a.dns != nil {
		a.dns.stop()
	}
	return nil
}

// Close stops every resolver and proxy. Networks and rules stay: the
// sandboxes outlive the worker, fail closed (no resolver, no proxy, the same
// drops) until a restart's Reconcile takes them back.
func (m *Manager) Close() {
	m.mu.Lock()
	all := make([]*attachment, 0, len(m.attached))
	for _, a := range m.attached {
		all = append(all, a)
	}
	m.mu.Unlock()
	for _, a := range all {
		_ = m.teardownListeners(a)
	}
	_ = os.Remove(m.cfg.StateDir) // only when empty
}

// Destroy removes the worker's table (for tests and an operator's cleanup).
func (m *Manager) Destroy() error { return m.fw.destroy() }

// systemResolvers reads nameserver lines; loopback ones are kept (the
// worker, not the sandbox, asks them).
func systemResolvers(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(ip, 53).String())
			}
		}
	}
	return out
}

// hostPrefixes are the host's own IPv4 addresses, as /32s, and the whole
// subnets of Docker's bridges (docker0, br-*), whose containers are not
// sandboxes of ours.
func hostPrefixes() []netip.Prefix {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		bridge := ifc.Name == "docker0" || strings.HasPrefix(ifc.Name, "br-")
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil {
				continue
			}
			ip, _ := netip.AddrFromSlice(ipn.IP.To4())
			out = append(out, netip.PrefixFrom(ip, 32))
			if ones, _ := ipn.Mask.Size(); bridge && ones >= 8 {
				out = append(out, netip.PrefixFrom(ip, ones).Masked())
			}
		}
	}
	return out
}
