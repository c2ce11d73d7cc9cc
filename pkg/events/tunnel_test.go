package events

import (
	"strings"
	"testing"
)

func TestValidTunnelID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{strings.Repeat("a", 32), true},
		{"0123456789abcdef0123456789abcdef", true},
		{strings.Repeat("a", 31), false},
		{strings.Repeat("a", 33), false},
		{strings.Repeat("A", 32), false},
		{strings.Repeat("a", 31) + ".", false},
		{strings.Repeat("a", 31) + "*", false},
		{strings.Repeat("a", 31) + ">", false},
		{"", false},
	} {
		if got := ValidTunnelID(tc.id); got != tc.want {
			t.Errorf("ValidTunnelID(%q) = %v", tc.id, got)
		}
	}
	if got := TunnelGatewaySubject("g", "c"); got != "sbx.tun.gw.g.c" {
		t.Errorf("gateway subject %q", got)
	}
	if got := TunnelWorkerConnSubject("docker", "w1", "c"); got != "sbx.tun.docker.w1.c.c" {
		t.Errorf("worker subject %q", got)
	}
}
