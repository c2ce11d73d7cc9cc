package egress

import "sync/atomic"

// Stats counts the decisions of the proxy and the resolver.
type Stats struct {
	ConnsAllowed atomic.Int64 // proxied connections dialled
	ConnsRefused atomic.Int64 // proxied connections closed unanswered
	DNSAnswered  atomic.Int64 // queries answered from upstream
	DNSRefused   atomic.Int64 // queries for names not listed (NXDOMAIN)
	DNSRebind    atomic.Int64 // answers refused for pointing at a private address
	NamesCapped  atomic.Int64 // lookups refused by the caps on names under wildcards (names.go)
}

// Counts is a snapshot of Stats.
type Counts struct {
	ConnsAllowed, ConnsRefused, DNSAnswered, DNSRefused, DNSRebind, NamesCapped int64
}

// Snapshot reads the counters.
func (s *Stats) Snapshot() Counts {
	return Counts{s.ConnsAllowed.Load(), s.ConnsRefused.Load(), s.DNSAnswered.Load(), s.DNSRefused.Load(), s.DNSRebind.Load(), s.NamesCapped.Load()}
}

func (s *Stats) add(o Counts) {
	s.ConnsAllowed.Add(o.ConnsAllowed)
	s.ConnsRefused.Add(o.ConnsRefused)
	s.DNSAnswered.Add(o.DNSAnswered)
	s.DNSRefused.Add(o.DNSRefused)
	s.DNSRebind.Add(o.DNSRebind)
}
