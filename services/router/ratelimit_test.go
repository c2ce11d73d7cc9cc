package router_test

import (
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestTenantRequestRate: every request of a tenant may make records in
// SBX_OPS (an exec two), so a tenant's requests are rate limited per
// router (max_requests_per_s, a burst of 5 s of it): past the burst a
// request is SBX_E1404 RateLimited (retryable, details.quota
// max_requests_per_s) and does nothing, while another tenant's requests
// pass. Before the limit, all 60 passed.
func TestTenantRequestRate(t *testing.T) {
	const rate = 4 // burst 20
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) {
		c.DefaultLimits = events.TenantLimits{MaxRequestsPerS: rate}
	}})
	a, b := newTenant(t, env), newTenant(t, env)
	limited := 0
	for range 60 {
		var q events.QuotaReply
		e := a.do(events.OpQuota, events.QuotaRequest{}, &q)
		switch {
		case e == nil:
		case e.Code == events.CodeRateLimited && e.Retryable && e.Details["quota"] == "max_requests_per_s":
			limited++
		default:
			t.Fatalf("quota: %v", e)
		}
	}
	if limited == 0 || limited > 60-5*rate {
		t.Errorf("%d of 60 requests limited; want some, and the burst of %d passed", limited, 5*rate)
	}
	var q events.QuotaReply
	if e := b.do(events.OpQuota, events.QuotaRequest{}, &q); e != nil {
		t.Errorf("another tenant's request: %v", e)
	}
	if q.Limits.MaxRequestsPerS != rate {
		t.Errorf("quota shows max_requests_per_s %d, want %d", q.Limits.MaxRequestsPerS, rate)
	}
	// A large request costs one more for every 4 KiB (at most the burst):
	// after one of 100 KiB, the next is limited at once.
	big := map[string]string{"pad": strings.Repeat("x", 100<<10)}
	codes, c := make([]events.Code, 2), newTenant(t, env)
	for i := range codes {
		if e := c.do(events.OpQuota, big, nil); e != nil {
			codes[i] = e.Code
		}
	}
	if codes[0] == events.CodeRateLimited || codes[1] != events.CodeRateLimited {
		t.Errorf("two 100 KiB requests: %v, want the second rate limited", codes)
	}
}
