package dockerworker

import "testing"

// Which daemons get the copy instead of the bind mount.
func TestAgentInjection(t *testing.T) {
	tests := []struct {
		mode AgentMode
		host string
		want string
	}{
		{AgentAuto, "", injectBind},
		{AgentAuto, "unix:///var/run/docker.sock", injectBind},
		{AgentAuto, "tcp://10.0.0.2:2376", injectCopy},
		{AgentAuto, "ssh://user@host", injectCopy},
		{AgentCopy, "", injectCopy},
		{AgentCopy, "unix:///var/run/docker.sock", injectCopy},
		{AgentOff, "", ""},
		{AgentOff, "tcp://10.0.0.2:2376", ""},
	}
	for _, tc := range tests {
		if got := agentInjection(tc.mode, tc.host); got != tc.want {
			t.Errorf("agentInjection(%q, %q) = %q, want %q", tc.mode, tc.host, got, tc.want)
		}
	}
}
