//go:build integration

package dockerworker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNoAgentRefusesToStart: a worker that finds no sbx-agent (none
// configured, none beside its binary, no Go toolchain to build one: a
// binary installed alone) refuses to start with an error that says how to
// get one, unless the operator asks for docker exec on purpose. Not
// parallel: it empties PATH.
func TestNoAgentRefusesToStart(t *testing.T) {
	needDocker(t)
	t.Setenv("PATH", "")
	cases := []struct {
		name    string
		cfg     Config
		starts  bool
		channel string // ExecPath when it starts
	}{
		{"no agent found", Config{}, false, ""},
		{"no agent, operator allows", Config{AllowNoAgent: true}, true, ExecPathDockerExec},
		{"agent off", Config{Agent: AgentOff}, true, ExecPathDockerExec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.WorkerID, c.cfg.Logger, c.cfg.AgentCacheDir = randID("test-"), testLogger(t), t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := NewBackend(ctx, c.cfg)
			if !c.starts {
				if err == nil {
					_ = b.Close()
					t.Fatal("started without an agent")
				}
				for _, want := range []string{"CGO_ENABLED=0 go build -o ", "/sbx-agent ./cmd/sbx-agent", "make build", "SBX_AGENT_BINARY", "SBX_DOCKER_NO_AGENT=1"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error does not say %q: %v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := b.ExecPath(); got != c.channel {
				t.Errorf("ExecPath %q, want %q", got, c.channel)
			}
		})
	}
}
