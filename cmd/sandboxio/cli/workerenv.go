package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

// workerConfig applies the worker settings read from the environment:
// SBX_AUDIT_POLICY (warn|fail) and SBX_AUDIT_TIMEOUT (a Go duration, or
// seconds).
func workerConfig(cfg worker.Config) (worker.Config, error) {
	if p := os.Getenv("SBX_AUDIT_POLICY"); p != "" {
		if p != worker.AuditWarn && p != worker.AuditFail {
			return cfg, fmt.Errorf("SBX_AUDIT_POLICY %q: want warn or fail", p)
		}
		cfg.AuditPolicy = p
	}
	if v := os.Getenv("SBX_AUDIT_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			var secs float64
			if _, serr := fmt.Sscanf(v, "%g", &secs); serr != nil || secs <= 0 {
				return cfg, fmt.Errorf("SBX_AUDIT_TIMEOUT %q: want a duration such as 2s", v)
			}
			d = time.Duration(secs * float64(time.Second))
		}
		if d <= 0 {
			return cfg, fmt.Errorf("SBX_AUDIT_TIMEOUT %q must be positive", v)
		}
		cfg.AuditTimeout = d
	}
	return cfg, nil
}
