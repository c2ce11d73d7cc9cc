//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// A daemon that cannot bind-mount the worker's files (remote) gets the agent
// through the archive API; AgentCopy forces that path on the local daemon.
// The agent is the exec path, the binary is not the sandbox user's to
// change, stateful code works, and the copy's volume goes with the sandbox.
func TestAgentByArchive(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentCopy})
	if b.agentBin() == "" {
		t.Fatalf("no agent: %s", b.agentReason())
	}
	tests := []struct {
		name string
		opts []createOpt
	}{
		{"writable root", []createOpt{func(s *worker.CreateSpec) { s.Secrets = map[string]string{"TOKEN": "s3cret"} }}},
		{"read-only root", []createOpt{withReadOnly()}},
		{"python", []createOpt{withImage(pythonImage)}},
		{"gvisor", []createOpt{func(s *worker.CreateSpec) { s.Spec.Runtime = RuntimeRunsc }}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := b.RuntimeTier(RuntimeRunsc); tc.name == "gvisor" && !ok {
				t.Skip("runsc is not registered")
			}
			spec := newSpec(tc.opts...)
			out := mustCreateSpec(t, b, spec)
			if out.ExecPath != events.ExecPathAgent {
				t.Fatalf("exec path %q (%s), want agent", out.ExecPath, out.ExecPathNote)
			}
			ins, err := b.cli.ContainerInspect(context.Background(), namePrefix+spec.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			var volume string
			for _, m := range ins.Mounts {
				if m.Type == mount.TypeBind && strings.HasPrefix(agentPath, m.Destination) {
					t.Fatalf("the agent is bind-mounted from %s", m.Source)
				}
				if m.Type == mount.TypeVolume && m.Destination == "/.sbx" {
					volume = m.Name
				}
			}
			if volume == "" {
				t.Fatalf("no volume at /.sbx: %+v", ins.Mounts)
			}
			got := sh(t, b, spec.SandboxID, `id -u; stat -c '%u %a' /.sbx /.sbx/sbx-agent; (echo x >/.sbx/sbx-agent) 2>/dev/null && echo WROTE; touch /.sbx/new 2>/dev/null && echo CREATED; true`)
			if got != userOf(t, b, spec.SandboxID)+"\n0 755\n0 555" {
				t.Fatalf("the agent's file as the sandbox user: %q", got)
			}
			if tc.name == "writable root" {
				// The worker's root helper (/.sbx/sbx-agent by docker exec)
				// runs from the copy too: the secrets are saved.
				sb := b.lookupCached(spec.SandboxID)
				poll.Eventually(t, 20*time.Second, func() error {
					var out bytes.Buffer
					err := b.helper(context.Background(), sb, "0:0", []string{"files", "read", stateFile, "--max", "65536"}, nil, &out)
					if err == nil && !strings.Contains(out.String(), "s3cret") {
						err = fmt.Errorf("saved env %q", out.String())
					}
					return err
				})
			}
			if spec.Spec.Image == pythonImage {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := b.RunCode(ctx, spec.SandboxID, worker.CodeRequest{Code: "x = 6\nx * 7", ContextID: "c1"})
				if err != nil || len(res.Results) != 1 || res.Results[0].Text != "42" {
					t.Fatalf("stateful code: %+v, %v", res, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := b.Kill(ctx, spec.SandboxID); err != nil {
				t.Fatal(err)
			}
			if _, err := rawDocker(t).VolumeInspect(ctx, volume); !cerrdefs.IsNotFound(err) {
				t.Fatalf("the agent's volume %s after kill: %v", volume, err)
			}
		})
	}
}
