package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// rules is what the host firewall needs to know of one sandbox.
type rules struct {
	key       string // short, unique: names the sandbox's chains
	bridge    string // the sandbox network's Linux bridge
	gateway   netip.Addr
	proxyPort uint16 // allowlist only
	policy    Policy
}

// firewall is the worker's own nftables table. Each change is one netlink
// batch, so the kernel never holds half a sandbox's rules: a sandbox's
// chains and the jumps to them are added together, or removed together. A
// rebuild of the whole table would outgrow one netlink message past a
// hundred or so sandboxes, so the table is written sandbox by sandbox; the
// base chains end with drops for every bridge of the worker (fail closed),
// and the jumps are inserted before them.
type firewall struct {
	table   string
	prefix  string         // every bridge of this worker starts with it
	never   []netip.Prefix // dropped for every sandbox
	mu      sync.Mutex     // serialises writes (netlink to the local kernel only)
	current map[string]rules
	base    bool // the table and its base chains exist
}

func newFirewall(table, prefix string, never []netip.Prefix) *firewall {
	return &firewall{table: table, prefix: prefix, never: never, current: make(map[string]rules)}
}

func (f *firewall) tbl() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: f.table}
}

// set installs (or replaces) the rules of one sandbox.
func (f *firewall) set(r rules) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.current[r.key]; ok {
		if err := f.del(r.key); err != nil {
			return err
		}
		delete(f.current, r.key)
	}
	if !f.base {
		if err := f.writeBase(); err != nil {
			return err
		}
	}
	if err := f.add(r); err != nil {
		if f.tableExists() {
			return err
		}
		// Someone removed our table (a ruleset flush): write it all again.
		if err := f.writeBase(); err != nil {
			return err
		}
		for _, o := range f.current {
			if err := f.add(o); err != nil {
				return err
			}
		}
		if err := f.add(r); err != nil {
			return err
		}
	}
	f.current[r.key] = r
	return nil
}

// sandboxChains counts the per-sandbox chains in the kernel's table.
func (f *firewall) sandboxChains() (int, error) {
	c, err := nftables.New()
	if err != nil {
		return 0, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ch := range chains {
		if ch.Table.Name == f.table && ch.Hooknum == nil {
			n++
		}
	}
	return n, nil
}

func (f *firewall) tableExists() bool {
	c, err := nftables.New()
	if err != nil {
		return false
	}
	_, err = c.ListTableOfFamily(f.table, nftables.TableFamilyINet)
	return err == nil
}

// remove drops the rules of one sandbox (absent is fine); with the last one
// the table goes.
func (f *firewall) remove(key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.current[key]; !ok {
		return nil
	}
	if len(f.current) == 1 {
		if err := f.drop(); err != nil {
			return err
		}
		delete(f.current, key)
		return nil
	}
	if err := f.del(key); err != nil {
		return err
	}
	delete(f.current, key)
	return nil
}

// replace installs exactly these sandboxes' rules (startup reconcile): the
// table is recreated with its base chains in one batch — from then on every
// bridge of the worker is dropped — then each sandbox is added back.
func (f *firewall) replace(all []rules) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = make(map[string]rules, len(all))
	if len(all) == 0 {
		return f.drop()
	}
	if err := f.writeBase(); err != nil {
		return err
	}
	var errs []error
	for _, r := range all {
		if err := f.add(r); err != nil {
			errs = append(errs, err)
			continue
		}
		f.current[r.key] = r
	}
	return errors.Join(errs...)
}

// destroy removes the table (tests, and a worker told to clean up).
func (f *firewall) destroy() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = map[string]rules{}
	return f.drop()
}

// drop deletes the table whether or not it exists (add + delete in one
// batch); it also proves we may write one.
func (f *firewall) drop() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("egress: netlink: %w", err)
	}
	t := f.tbl()
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: delete nftables table %s: %w", f.table, err)
	}
	f.base = false
	return nil
}

// verify reads the kernel's table back: the sandbox's chains must be there.
func (f *firewall) verify(key string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("egress: list nftables chains: %w", err)
	}
	want := map[string]bool{"in_" + key: false, "fw_" + key: false}
	for _, ch := range chains {
		if ch.Table.Name != f.table {
			continue
		}
		if _, ok := want[ch.Name]; ok {
			want[ch.Name] = true
		}
	}
	for name, ok := range want {
		if !ok {
			return fmt.Errorf("egress: chain %s missing from table %s after install", name, f.table)
		}
	}
	return nil
}

// base chains, by name.
func baseChains(t *nftables.Table) (input, forward, pre *nftables.Chain) {
	accept := nftables.ChainPolicyAccept
	input = &nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(-1), Policy: &accept}
	forward = &nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(-1), Policy: &accept}
	// Before Docker's nat PREROUTING (-100): the first nat chain that maps a
	// connection wins.
	pre = &nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-101), Policy: &accept}
	return input, forward, pre
}

// writeBase recreates the table with its base chains and the fail-closed
// drops, in one batch.
func (f *firewall) writeBase() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("egress: netlink: %w", err)
	}
	t := f.tbl()
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	input, forward, pre := baseChains(t)
	c.AddChain(input)
	c.AddChain(forward)
	c.AddChain(pre)
	// Fail closed: a bridge of this worker without rules (made, not yet
	// filtered, or left by a crash) passes nothing.
	if f.prefix != "" {
		c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: cat(ifprefix(expr.MetaKeyIIFNAME, f.prefix), &expr.Counter{}, verdict(expr.VerdictDrop)[0])})
		c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: cat(ifprefix(expr.MetaKeyIIFNAME, f.prefix), &expr.Counter{}, verdict(expr.VerdictDrop)[0])})
		c.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: cat(ifprefix(expr.MetaKeyOIFNAME, f.prefix), &expr.Counter{}, verdict(expr.VerdictDrop)[0])})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: write nftables table %s: %w", f.table, err)
	}
	f.base = true
	return nil
}

// del removes one sandbox's jumps and chains in one batch.
func (f *firewall) del(key string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("egress: netlink: %w", err)
	}
	t := f.tbl()
	input, forward, pre := baseChains(t)
	for _, ch := range []*nftables.Chain{input, forward, pre} {
		rs, err := c.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("egress: read chain %s: %w", ch.Name, err)
		}
		for _, r := range rs {
			if string(r.UserData) == key {
				if err := c.DelRule(r); err != nil {
					return fmt.Errorf("egress: delete rule: %w", err)
				}
			}
		}
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("egress: list nftables chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name == f.table && strings.HasSuffix(ch.Name, "_"+key) && len(ch.Name) == len(key)+3 {
			c.FlushChain(ch)
			c.DelChain(ch)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: remove rules of %s from %s: %w", key, f.table, err)
	}
	return nil
}

// add writes one sandbox's chains and the jumps to them in one batch.
func (f *firewall) add(r rules) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("egress: netlink: %w", err)
	}
	t := f.tbl()
	input, forward, pre := baseChains(t)
	k := r.key
	ud := []byte(r.key)
	in := c.AddChain(&nftables.Chain{Name: "in_" + k, Table: t})
	fw := c.AddChain(&nftables.Chain{Name: "fw_" + k, Table: t})
	fi := c.AddChain(&nftables.Chain{Name: "fi_" + k, Table: t})
	rule := func(ch *nftables.Chain, e ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e, UserData: ud})
	}
	// Jumps go first in their base chains, ahead of the fail-closed drops.
	jump0 := func(ch *nftables.Chain, e ...expr.Any) {
		c.InsertRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e, UserData: ud})
	}

	// To the host: replies, the sandbox's resolver and proxy, nothing else.
	rule(in, cat(ctEstablished(), verdict(expr.VerdictAccept))...)
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(in, cat(ipv4(), daddr(netip.PrefixFrom(r.gateway, 32)), l4(proto), dport(53), verdict(expr.VerdictAccept))...)
	}
	if r.policy.Mode == ModeAllowlist {
		rule(in, cat(ipv4(), daddr(netip.PrefixFrom(r.gateway, 32)), l4(unix.IPPROTO_TCP), dport(r.proxyPort), verdict(expr.VerdictAccept))...)
	}
	rule(in, &expr.Counter{}, verdict(expr.VerdictDrop)[0])

	// Through the host: never IPv6, never the never-ranges.
	rule(fw, cat(ctEstablished(), verdict(expr.VerdictAccept))...)
	rule(fw, cat(notIPv4(), &expr.Counter{}, verdict(expr.VerdictDrop)[0])...)
	for _, n := range f.never {
		rule(fw, cat(daddr(n), &expr.Counter{}, verdict(expr.VerdictDrop)[0])...)
	}
	switch r.policy.Mode {
	case ModeAllow:
		for _, p := range Private {
			rule(fw, cat(daddr(p), &expr.Counter{}, verdict(expr.VerdictDrop)[0])...)
		}
		rule(fw, verdict(expr.VerdictAccept)...)
	case ModeAllowlist:
		for _, p := range r.policy.CIDRs {
			rule(fw, cat(daddr(p), verdict(expr.VerdictAccept))...)
		}
		rule(fw, &expr.Counter{}, verdict(expr.VerdictDrop)[0])
	default:
		rule(fw, &expr.Counter{}, verdict(expr.VerdictDrop)[0])
	}
	// Into the sandbox: replies only.
	rule(fi, cat(ctEstablished(), verdict(expr.VerdictAccept))...)
	rule(fi, &expr.Counter{}, verdict(expr.VerdictDrop)[0])

	if r.policy.Mode == ModeAllowlist {
		pr := c.AddChain(&nftables.Chain{Name: "pr_" + k, Table: t})
		rule(pr, cat(notIPv4(), verdict(expr.VerdictReturn))...)
		rule(pr, cat(notL4(unix.IPPROTO_TCP), verdict(expr.VerdictReturn))...)
		rule(pr, cat(daddr(netip.PrefixFrom(r.gateway, 32)), dport(53), verdict(expr.VerdictReturn))...)
		for _, p := range r.policy.CIDRs {
			rule(pr, cat(daddr(p), verdict(expr.VerdictReturn))...)
		}
		rule(pr, &expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(r.proxyPort)},
			&expr.Redir{RegisterProtoMin: 1})
		jump0(pre, cat(ifname(expr.MetaKeyIIFNAME, r.bridge), jump(pr.Name))...)
	}
	jump0(input, cat(ifname(expr.MetaKeyIIFNAME, r.bridge), jump(in.Name))...)
	jump0(forward, cat(ifname(expr.MetaKeyIIFNAME, r.bridge), jump(fw.Name))...)
	jump0(forward, cat(ifname(expr.MetaKeyOIFNAME, r.bridge), jump(fi.Name))...)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: write rules of %s to %s: %w", k, f.table, err)
	}
	return nil
}

// dropCounts sums the packets each drop counter of the table has seen, per
// sandbox key ("" for the fail-closed rules).
func (f *firewall) dropCounts() (map[string]uint64, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: f.table}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	var errs []error
	for _, ch := range chains {
		if ch.Table.Name != f.table {
			continue
		}
		rs, err := c.GetRules(t, ch)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range rs {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					out[string(r.UserData)] += ctr.Packets
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

func cat(parts ...any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		switch v := p.(type) {
		case expr.Any:
			out = append(out, v)
		case []expr.Any:
			out = append(out, v...)
		}
	}
	return out
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

// ifprefix matches an interface name starting with prefix (a compare of
// only the prefix's bytes, as nft's "sbx*" does).
func ifprefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)}}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func notIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}}}
}

func notL4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{proto}}}
}

// daddr matches an IPv4 destination inside p; callers check IPv4 first
// (every use follows an nfproto test or sits in an IPv4-only chain path).
func daddr(p netip.Prefix) []expr.Any {
	a := p.Masked().Addr().As4()
	mask := netipMask(p.Bits())
	return cat(ipv4(),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]})
}

func dport(port uint16) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)}}
}

func netipMask(bits int) []byte {
	m := uint32(0)
	if bits > 0 {
		m = ^uint32(0) << (32 - bits)
	}
	return binaryutil.BigEndian.PutUint32(m)
}
