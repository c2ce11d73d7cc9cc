package cli

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

func TestParsePools(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		fail bool
	}{
		{"", 0, false},
		{"sandboxio/python:3.11=4", 1, false},
		{"sandboxio/python:3.11=4, sandboxio/base:latest@runsc=1", 2, false},
		{"sandboxio/python:3.11", 0, true},
		{"img=-1", 0, true},
		{"img=x", 0, true},
	} {
		pools, err := parsePools(tc.in)
		if (err != nil) != tc.fail || len(pools) != tc.n {
			t.Errorf("parsePools(%q) = %+v, %v", tc.in, pools, err)
		}
	}
	pools, _ := parsePools("sandboxio/base:latest@runsc=2")
	if p := pools[0]; p.Image != "sandboxio/base:latest" || p.Runtime != "runsc" || p.Size != 2 {
		t.Errorf("parsed %+v", p)
	}
}

func TestWorkerConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		policy, timeout string
		ok              bool
	}{
		{"", "", true}, {"fail", "500ms", true}, {"warn", "3", true},
		{"strict", "", false}, {"", "soon", false}, {"", "-1s", false},
	} {
		t.Setenv("SBX_AUDIT_POLICY", tc.policy)
		t.Setenv("SBX_AUDIT_TIMEOUT", tc.timeout)
		cfg, err := workerConfig(worker.Config{})
		if (err == nil) != tc.ok {
			t.Errorf("%q/%q: %v", tc.policy, tc.timeout, err)
		}
		if err == nil && tc.policy != "" && cfg.AuditPolicy != tc.policy {
			t.Errorf("policy %q not applied", tc.policy)
		}
	}
}
