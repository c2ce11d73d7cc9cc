package router

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Request rates (issue 22): every request of a tenant may make operation
// records that SBX_OPS stores (an exec two: opened and closed), so each
// router lets a tenant make at most max_requests_per_s requests a second,
// with a burst of rateBurst seconds' worth; past it a request is
// SBX_E1404 RateLimited (retryable) and does nothing. With several routers
// a tenant may make that many on each (docs/operations.md has the bound
// on SBX_OPS this gives).

// rateBurst is how many seconds of its rate a tenant may send at once.
const rateBurst = 5

// tenantRates holds a token bucket per tenant that sent requests.
type tenantRates struct {
	mu sync.Mutex
	by map[string]*rate.Limiter
}

// allow takes one request of tenant from its bucket at perS a second
// (negative: unlimited), or answers SBX_E1404.
func (r *tenantRates) allow(tenant string, perS int64, now time.Time) *events.Error {
	if perS < 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]*rate.Limiter{}
	}
	l := r.by[tenant]
	if l == nil || l.Limit() != rate.Limit(perS) {
		l = rate.NewLimiter(rate.Limit(perS), int(perS)*rateBurst)
		r.by[tenant] = l
	}
	if l.AllowN(now, 1) {
		return nil
	}
	wait := time.Duration(float64(time.Second) / float64(max(perS, 1)))
	return events.Errorf(events.CodeRateLimited, "tenant request rate max_requests_per_s is %d (a burst of %d): retry after %s", perS, perS*rateBurst, wait).
		With("quota", "max_requests_per_s").With("limit", perS).With("retry_after_ms", wait.Milliseconds())
}

// checkRate applies the caller's request rate; open callers have none.
func (s *Service) checkRate(c caller) *events.Error {
	if !c.authed {
		return nil
	}
	lim, _ := s.limitsFor(c.tenant)
	return s.rates.allow(c.tenant, lim.MaxRequestsPerS, time.Now())
}
