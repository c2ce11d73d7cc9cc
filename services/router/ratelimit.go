package router

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Request rates: every request of a tenant may make operation
// records that SBX_OPS stores (an exec two: opened and closed, each with
// the request's argv), so each router lets a tenant make at most
// max_requests_per_s requests a second, with a burst of rateBurst seconds'
// worth; a request whose body a record may carry (all but the data of
// files.put, files.write and stdin) costs one more for every rateUnit
// bytes of it, so that large requests (a 256 KiB argv) cannot make large
// records at the full rate. Past it a request is SBX_E1404 RateLimited (retryable)
// and does nothing. With several routers a tenant may make that many on
// each (docs/operations.md has the bound on SBX_OPS this gives).

// rateBurst is how many seconds of its rate a tenant may send at once;
// rateUnit is the body size that costs one request more.
const (
	rateBurst = 5
	rateUnit  = 4 << 10
)

// tenantRates holds a token bucket per tenant that sent requests.
type tenantRates struct {
	mu sync.Mutex
	by map[string]*rate.Limiter
}

// allow takes a request of size bytes of tenant from its bucket at perS a
// second (negative: unlimited), or answers SBX_E1404.
func (r *tenantRates) allow(tenant string, perS int64, size int, now time.Time) *events.Error {
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
	if l.AllowN(now, min(1+size/rateUnit, l.Burst())) {
		return nil
	}
	wait := time.Duration(float64(time.Second) / float64(max(perS, 1)))
	return events.Errorf(events.CodeRateLimited, "tenant request rate max_requests_per_s is %d (a burst of %d): retry after %s", perS, perS*rateBurst, wait).
		With("quota", "max_requests_per_s").With("limit", perS).With("retry_after_ms", wait.Milliseconds())
}

// dataOps carry data that no record holds (a record has their path or
// process): their size costs nothing more.
var dataOps = map[string]bool{events.OpFilesPut: true, events.OpFilesWrite: true, events.OpStdin: true}

// checkRate applies the caller's request rate to a request of op with a
// body of size bytes; open callers have none.
func (s *Service) checkRate(c caller, op string, size int) *events.Error {
	if !c.authed {
		return nil
	}
	if dataOps[op] {
		size = 0
	}
	lim, _ := s.limitsFor(c.tenant)
	return s.rates.allow(c.tenant, lim.MaxRequestsPerS, size, time.Now())
}
