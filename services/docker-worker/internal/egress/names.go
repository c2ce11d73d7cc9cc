package egress

import (
	"slices"
	"sync"
	"time"
)

// Caps on the names a sandbox may have looked up under a listed wildcard
// (*.zone). Each such name reaches the zone's authoritative servers, so a
// sandbox can send data out in the names themselves (DNS exfiltration),
// through its resolver or through the proxy, which looks up an SNI, Host or
// CONNECT name. Exact listed names are a fixed set and are not capped.
const (
	// MaxWildcardName is the longest name (in characters) accepted under a
	// wildcard; the DNS limit is 253.
	MaxWildcardName = 128
	// MaxWildcardNames is how many distinct names under wildcards one
	// sandbox may have looked up per NameWindow; names already looked up
	// in the window pass.
	MaxWildcardNames = 64
	NameWindow       = time.Minute
)

// nameGuard applies the caps for one sandbox; the resolver and the proxy
// share it. The zero value is ready.
type nameGuard struct {
	mu    sync.Mutex
	start time.Time // of the current window
	seen  map[string]struct{}
	now   func() time.Time // nil: time.Now
}

// allow reports whether name (normalised, matched by p) may be looked up.
func (g *nameGuard) allow(p Policy, name string) bool {
	if g == nil || p.Mode != ModeAllowlist || slices.Contains(p.Names, name) {
		return true
	}
	if len(name) > MaxWildcardName {
		return false
	}
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	t := now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil || t.Sub(g.start) >= NameWindow {
		g.start, g.seen = t, make(map[string]struct{})
	}
	if _, ok := g.seen[name]; ok {
		return true
	}
	if len(g.seen) >= MaxWildcardNames {
		return false
	}
	g.seen[name] = struct{}{}
	return true
}
