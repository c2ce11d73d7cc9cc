package events

import "testing"

// TestAllowEntryOneCode: an allowlist entry that is no host, address or
// CIDR is SBX_E1720 with details.entry whichever check refuses it (the
// request's here, a worker's for what only it knows); it was SBX_E1007
// here and SBX_E1720 at the worker (issue 22, D.22).
func TestAllowEntryOneCode(t *testing.T) {
	for _, entry := range []string{"a..b", "ex_ample.com", "10.0.0.0/33", "exa mple.com", "*.*.com", "été.fr", ""} {
		r := CreateRequest{Class: "standard", TimeoutS: 60, Network: &NetworkPolicy{Egress: EgressAllow, Allow: []string{"ok.example.com", entry}}}
		e := r.Validate()
		if e == nil || e.Code != CodeEgressInvalidEntry || e.Details["entry"] != entry {
			t.Errorf("allow entry %q: %v (details %v), want %s with details.entry", entry, e, detailsOf(e), CodeEgressInvalidEntry)
		}
	}
	r := CreateRequest{Class: "standard", TimeoutS: 60, Network: &NetworkPolicy{Egress: "open"}}
	if e := r.Validate(); e == nil || e.Code != CodeInvalidValue {
		t.Errorf("egress open: %v, want %s", e, CodeInvalidValue)
	}
}

func detailsOf(e *Error) map[string]any {
	if e == nil {
		return nil
	}
	return e.Details
}
