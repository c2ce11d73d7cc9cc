package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
)

// upstream asks the host's resolvers; the sandbox never reaches them.
type upstream struct {
	servers []string // host:port
	timeout time.Duration
}

// exchange sends q to each server in turn until one answers (TCP when the
// UDP answer is truncated).
func (u upstream) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for _, s := range u.servers {
		for _, netw := range []string{"udp", "tcp"} {
			c := &dns.Client{Net: netw, Timeout: u.timeout}
			r, _, err := c.ExchangeContext(ctx, q, s)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if r.Truncated && netw == "udp" {
				continue
			}
			return r, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no upstream resolver configured"))
	}
	return nil, fmt.Errorf("egress: upstream dns: %w", errors.Join(errs...))
}

// lookup4 resolves name's A records upstream.
func (u upstream) lookup4(ctx context.Context, name string) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, err := u.exchange(ctx, q)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("egress: resolve %s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

// resolver answers one sandbox's DNS: in allowlist mode only for listed
// names (NXDOMAIN otherwise), never with an AAAA, HTTPS or SVCB record (no
// IPv6 route; no ECH keys that would hide the SNI), and never with an A
// record the sandbox may not reach (DNS rebinding): an answer left with
// none is REFUSED.
type resolver struct {
	policy Policy
	never  []netip.Prefix
	up     upstream
	stats  *Stats
	limit  *rate.Limiter // queries per second of this sandbox; nil = unbounded
	names  *nameGuard    // caps on names under wildcards; nil = none
}

// dnsRate bounds one sandbox's queries (the upstream is shared).
const dnsRate, dnsBurst = 100, 200

func (r *resolver) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	resp := r.answer(q)
	if w.RemoteAddr() != nil && w.RemoteAddr().Network() == "udp" {
		size := dns.MinMsgSize
		if o := q.IsEdns0(); o != nil && int(o.UDPSize()) > size {
			size = min(int(o.UDPSize()), dns.DefaultMsgSize)
		}
		resp.Truncate(size) // sets TC: the client asks again over TCP
	}
	_ = w.WriteMsg(resp)
}

func (r *resolver) answer(q *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		resp.SetRcode(q, dns.RcodeFormatError)
		return resp
	}
	if r.limit != nil && !r.limit.Allow() {
		resp.SetRcode(q, dns.RcodeRefused)
		return resp
	}
	qq := q.Question[0]
	name := strings.TrimSuffix(strings.ToLower(qq.Name), ".")
	if r.policy.Mode == ModeAllowlist && !r.policy.MatchName(name) {
		r.stats.DNSRefused.Add(1)
		resp.SetRcode(q, dns.RcodeNameError)
		return resp
	}
	if !r.names.allow(r.policy, name) {
		r.stats.NamesCapped.Add(1)
		resp.SetRcode(q, dns.RcodeRefused)
		return resp
	}
	switch qq.Qtype {
	case dns.TypeAAAA, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR:
		resp.SetReply(q) // empty: no such records for the sandbox
		return resp
	}
	if qq.Qclass != dns.ClassINET {
		resp.SetRcode(q, dns.RcodeRefused)
		return resp
	}
	// The DNS server gives a query no context: each upstream exchange is bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.up.timeout)
	defer cancel()
	fwd := new(dns.Msg)
	fwd.SetQuestion(dns.Fqdn(name), qq.Qtype)
	fwd.RecursionDesired = true
	up, err := r.up.exchange(ctx, fwd)
	if err != nil {
		resp.SetRcode(q, dns.RcodeServerFailure)
		return resp
	}
	resp.SetReply(q)
	resp.Rcode = up.Rcode
	var hadA, keptA bool
	resp.Answer, hadA, keptA = r.filter(up.Answer)
	resp.Ns, _, _ = r.filter(up.Ns)
	if hadA && !keptA {
		r.stats.DNSRebind.Add(1)
		resp.Answer = nil
		resp.Ns = nil
		resp.Rcode = dns.RcodeRefused
		return resp
	}
	r.stats.DNSAnswered.Add(1)
	return resp
}

// filter drops every AAAA, HTTPS and SVCB record and every A record that
// points where the sandbox may not go.
func (r *resolver) filter(rrs []dns.RR) (out []dns.RR, hadA, keptA bool) {
	for _, rr := range rrs {
		switch v := rr.(type) {
		case *dns.A:
			hadA = true
			ip, ok := netip.AddrFromSlice(v.A.To4())
			if !ok || !ipAllowed(ip, r.policy, r.never) {
				continue
			}
			keptA = true
		case *dns.AAAA, *dns.HTTPS, *dns.SVCB:
			continue
		}
		out = append(out, rr)
	}
	return out, hadA, keptA
}

// dnsServers serves a resolver on gw:53, UDP and TCP.
type dnsServers struct {
	udp, tcp *dns.Server
	done     chan struct{}
	once     sync.Once
}

func startDNS(gw netip.Addr, h dns.Handler) (*dnsServers, error) {
	addr := netip.AddrPortFrom(gw, 53).String()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("egress: dns listen udp %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		_ = pc.Close()
		return nil, fmt.Errorf("egress: dns listen tcp %s: %w", addr, err)
	}
	s := &dnsServers{
		udp:  &dns.Server{PacketConn: pc, Handler: h, UDPSize: dns.MinMsgSize},
		tcp:  &dns.Server{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxTCPQueries: 32},
		done: make(chan struct{}, 2),
	}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go func() {
			defer func() { s.done <- struct{}{} }()
			_ = srv.ActivateAndServe()
		}()
	}
	return s, nil
}

// stop shuts both servers down and waits for them (bounded); once.
func (s *dnsServers) stop() { s.once.Do(s.shutdown) }

func (s *dnsServers) shutdown() {
	// Teardown, bounded here.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		if err := srv.ShutdownContext(ctx); err != nil {
			// Not started yet or already down: close the sockets ourselves.
			if srv.PacketConn != nil {
				_ = srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				_ = srv.Listener.Close()
			}
		}
	}
	for range 2 {
		select {
		case <-s.done:
		case <-ctx.Done():
			return
		}
	}
}
