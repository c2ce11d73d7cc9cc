package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/system"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// EgressConfig configures the allow and allowlist network policies (deny,
// network none, needs nothing). They need the worker on the Docker host, as
// root, with nftables: without that, both are refused with
// CapabilityNotSupported. See docs/backends/docker.md.
type EgressConfig struct {
	// Disabled refuses allow and allowlist on this worker.
	Disabled bool
	// Unfiltered lets allow (not allowlist) fall back to Docker's default
	// bridge, unfiltered — the host and other containers reachable — on a
	// worker that cannot write host rules (a developer's machine without
	// root). Each such create carries a warning. Never in production.
	Unfiltered bool
	// Pool is the IPv4 prefix sandbox subnets (/29 each) come from.
	// Default 10.213.0.0/16; it must not overlap other networks.
	Pool string
	// Deny are CIDRs of the operator's networks no sandbox may reach,
	// besides private ranges, the host's addresses and other sandboxes.
	Deny []string
	// DNS are the resolvers (ip or ip:port) the worker asks on the
	// sandboxes' behalf. Default: the host's /etc/resolv.conf.
	DNS []string
	// AllowMetadata lets sandboxes reach link-local and cloud metadata
	// addresses (169.254.0.0/16, 100.100.100.200, 168.63.129.16) when a
	// policy lists them. Off by default: such entries are refused and the
	// host's rules drop them.
	AllowMetadata bool
	// MaxEntries caps network.allow (default 64); MinPrefix is the widest
	// CIDR accepted (default /8).
	MaxEntries int
	MinPrefix  int
	// StateDir holds per-sandbox resolv.conf files. Default
	// /run/sandboxio/egress/<worker>.
	StateDir string
}

// egressState is the backend's egress machinery, or why there is none.
type egressState struct {
	mgr      *egress.Manager
	why      string // set when mgr is nil
	runscNet string // set when runsc sandboxes cannot get allow/allowlist
	// runscNetRuntime is the daemon runtime gVisor sandboxes with a network
	// (allow, allowlist) run on: runsc itself when it has its own network
	// stack, else RuntimeRunscNet where deploy/images/gvisor.sh registered
	// it; "" with runscNet set when neither can.
	runscNetRuntime string
}

// RuntimeRunscNet is gVisor with its own network stack (--network=sandbox),
// registered by deploy/images/gvisor.sh beside a runsc registered with
// --network=none, only where a probe container starts with it.
const RuntimeRunscNet = RuntimeRunsc + "-net"

// runscNetworkOff says why a runsc registered with args cannot give a
// sandbox a filtered network ("" when it can): only gVisor's own stack
// (--network=sandbox, the default) passes traffic through the sandbox's
// interface, where the worker's rules apply; none has no interface, and
// host would bypass the rules.
func runscNetworkOff(args []string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "network="); ok && v != "sandbox" {
			return "--network=" + v
		}
	}
	return ""
}

// runscEgress finds the runtime for gVisor sandboxes with a network.
func runscEgress(runtimes map[string]system.RuntimeWithStatus) (name, why string) {
	rt, ok := runtimes[RuntimeRunsc]
	if !ok {
		return "", ""
	}
	off := runscNetworkOff(rt.Args)
	if off == "" {
		return RuntimeRunsc, ""
	}
	if nrt, ok := runtimes[RuntimeRunscNet]; ok && runscNetworkOff(nrt.Args) == "" {
		return RuntimeRunscNet, ""
	}
	return "", "runsc is registered with " + off + " and there is no " + RuntimeRunscNet +
		" runtime (deploy/images/gvisor.sh registers one where its runsc can start a container with its own network stack)"
}

func (c EgressConfig) managerConfig(workerID string, log *slog.Logger) (egress.Config, error) {
	mc := egress.Config{WorkerID: workerID, StateDir: c.StateDir, Logger: log, AllowMetadata: c.AllowMetadata,
		Limits: egress.Limits{MaxEntries: c.MaxEntries, MinPrefix: c.MinPrefix}}
	if c.Pool != "" {
		p, err := netip.ParsePrefix(c.Pool)
		if err != nil {
			return mc, fmt.Errorf("dockerworker: egress pool %q: %w", c.Pool, err)
		}
		mc.Pool = p
	}
	for _, d := range c.Deny {
		p, err := netip.ParsePrefix(d)
		if err != nil {
			return mc, fmt.Errorf("dockerworker: egress deny %q: %w", d, err)
		}
		mc.Deny = append(mc.Deny, p)
	}
	for _, s := range c.DNS {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			mc.Upstreams = append(mc.Upstreams, ap.String())
		} else if ip, err := netip.ParseAddr(s); err == nil {
			mc.Upstreams = append(mc.Upstreams, netip.AddrPortFrom(ip, 53).String())
		} else {
			return mc, fmt.Errorf("dockerworker: egress dns %q: want ip or ip:port", s)
		}
	}
	return mc, nil
}

// startEgress sets up the egress manager and restores the host rules of
// live sandboxes. A host where it cannot work gets a state that refuses
// allow and allowlist; only a bad configuration is an error.
func startEgress(ctx context.Context, cfg Config, cli dockerAPI, info system.Info, log *slog.Logger) (egressState, error) {
	var st egressState
	st.runscNetRuntime, st.runscNet = runscEgress(info.Runtimes)
	if cfg.Egress.Disabled {
		st.why = "egress allow is disabled on this worker"
		return st, nil
	}
	nc, ok := cli.(egress.Docker)
	if !ok {
		st.why = "the docker client cannot manage networks"
		return st, nil
	}
	mc, err := cfg.Egress.managerConfig(cfg.WorkerID, log)
	if err != nil {
		return st, err
	}
	mgr, err := egress.New(mc, nc)
	if err != nil {
		st.why = "egress setup: " + err.Error()
		log.Warn("egress allow and allowlist unavailable", slog.Any("err", err))
		return st, nil
	}
	if err := mgr.Reconcile(ctx); err != nil {
		if errors.Is(err, egress.ErrFirewall) {
			st.why = "the worker cannot write host firewall rules (nftables, root)"
			log.Warn("egress allow and allowlist unavailable", slog.Any("err", err))
			mgr.Close()
			return st, nil
		}
		log.Warn("egress reconcile", slog.Any("err", err))
	}
	st.mgr = mgr
	return st, nil
}

// egressPolicy validates the request's network policy and refuses what this
// worker cannot enforce for the runtime, before anything is created.
func (b *Backend) egressPolicy(n events.NetworkPolicy, runtime string) (egress.Policy, error) {
	var never []netip.Prefix
	lim := egress.Limits{MaxEntries: b.cfg.Egress.MaxEntries, MinPrefix: b.cfg.Egress.MinPrefix}
	if b.egress.mgr != nil {
		never, lim = b.egress.mgr.Never(), b.egress.mgr.Limits()
	}
	p, err := egress.Parse(n, lim, append(never, egress.NeverRanges(b.cfg.Egress.AllowMetadata)...))
	if err != nil || p.Mode == egress.ModeDeny {
		return p, err
	}
	capability := func(why string) error {
		c := events.CapNetworkAllowlist
		return events.Errorf(events.CodeCapabilityNotSupp, "network egress %s cannot be enforced here: %s", p.Mode, why).
			With("capability", string(c))
	}
	if b.egress.mgr == nil {
		if p.Mode == egress.ModeAllow && b.cfg.Egress.Unfiltered && !b.cfg.Egress.Disabled {
			return p, nil // the default bridge; see egressWarning
		}
		return p, capability(b.egress.why)
	}
	if runtime == RuntimeRunsc && b.egress.runscNet != "" {
		return p, capability(b.egress.runscNet)
	}
	return p, nil
}

// egressWarning is the create warning for an unfiltered allow.
func (b *Backend) egressWarning(p egress.Policy) string {
	if p.Mode == egress.ModeAllow && b.egress.mgr == nil {
		return "network egress allow is NOT filtered on this worker (" + b.egress.why + "): the host and other containers are reachable"
	}
	return ""
}

// attachEgress gives the sandbox its network before its container exists.
func (b *Backend) attachEgress(ctx context.Context, id string, p egress.Policy) (*egress.Attachment, error) {
	if p.Mode == egress.ModeDeny || b.egress.mgr == nil {
		return nil, nil
	}
	a, err := b.egress.mgr.Attach(ctx, id, p)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// detachEgress removes the sandbox's network after its container is gone.
func (b *Backend) detachEgress(ctx context.Context, id string) {
	if b.egress.mgr == nil {
		return
	}
	if err := b.egress.mgr.Detach(ctx, id); err != nil {
		b.log.Warn("egress detach", "sandbox", id, slog.Any("err", err))
	}
}

// applyEgress puts the container on its own network with the worker's
// resolver; without an attachment the container keeps what it had.
// A gVisor sandbox runs on the runtime with its own network stack.
func (b *Backend) applyEgress(cfg *container.Config, hc *container.HostConfig, a *egress.Attachment) {
	if a == nil {
		return
	}
	if hc.Runtime == RuntimeRunsc && b.egress.runscNetRuntime != "" {
		hc.Runtime = b.egress.runscNetRuntime
	}
	cfg.NetworkDisabled = false
	hc.NetworkMode = container.NetworkMode(a.Network)
	hc.DNS = []string{a.Gateway.String()}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: a.ResolvConf, Target: "/etc/resolv.conf", ReadOnly: true})
}

// sweepEgress removes sandbox networks (any worker's) whose container is
// gone, with their rules: a container removed by hand or by a crash.
func (b *Backend) sweepEgress(ctx context.Context) {
	if b.egress.mgr == nil {
		return
	}
	if n, err := b.egress.mgr.Sweep(ctx, 2*time.Minute, 32, ""); err != nil || n > 0 {
		b.log.Info("egress sweep", "removed", n, slog.Any("err", err))
	}
}

// EgressStats are the proxy's and resolvers' counts over every sandbox.
func (b *Backend) EgressStats() egress.Counts {
	if b.egress.mgr == nil {
		return egress.Counts{}
	}
	return b.egress.mgr.Stats()
}

func egressCapabilities(st egressState, caps events.Capabilities) events.Capabilities {
	if st.mgr != nil && !slices.Contains(caps, events.CapNetworkAllowlist) {
		caps = append(caps, events.CapNetworkAllowlist)
	}
	return caps
}
