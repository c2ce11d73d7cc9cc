package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dockerevents "github.com/docker/docker/api/types/events"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// oomDaemon is a daemon whose container was killed for memory: inspect
// says so until the container is removed, then that it is not found.
type oomDaemon struct {
	dockerAPI
	removed atomic.Bool
}

func (d *oomDaemon) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	if d.removed.Load() {
		return container.InspectResponse{}, cerrdefs.ErrNotFound
	}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		State: &container.State{Status: "exited", OOMKilled: true, ExitCode: 137}}}, nil
}

// TestOOMJudgedAtDeath: gVisor's runtime killed for memory takes the whole
// sandbox; the daemon's die event reaches the worker, which removes the
// container, before an exec's agent connection is seen closed. The exec is
// still told SandboxOOMKilled, not SandboxGone: the death is judged when
// it is reported, while the container is there to inspect. (Before, the
// exec's answer depended on which came first: TestGVisorMemoryBomb failed
// one run in four.)
func TestOOMJudgedAtDeath(t *testing.T) {
	d := &oomDaemon{}
	b := &Backend{cli: d, log: slog.New(slog.DiscardHandler), sandboxes: map[string]*sandbox{}}
	const id = "01m9aaaaaaaaaaaaaaaaaaaaaa"
	sb := &sandbox{id: id, containerID: "c1", runtime: RuntimeRunsc, procs: map[string]*process{}, died: make(chan struct{})}
	b.sandboxes[id] = sb
	// The worker's reaction to a death: kill, which removes the container.
	b.OnSandboxDeath(func(string, string) { sb.gone.Store(true); d.removed.Store(true) })
	b.containerDied(dockerevents.Message{Actor: dockerevents.Actor{ID: "c1",
		Attributes: map[string]string{"name": namePrefix + id, "exitCode": "137"}}})
	if !sb.gone.Load() || !d.removed.Load() {
		t.Fatal("the death handler did not run")
	}
	lost := fmt.Errorf("%w: read: %w", agent.ErrUnavailable, io.EOF)
	if err := b.agentFailed(context.Background(), sb, lost); !errors.Is(err, events.ErrSandboxOOMKilled) {
		t.Fatalf("agent lost after the death was handled: %v, want SandboxOOMKilled", err)
	}
	if st, err := b.deathOf(sb); !errors.Is(err, events.ErrSandboxOOMKilled) || !st.OOMKilled {
		t.Fatalf("the Docker exec path's answer: %+v %v, want SandboxOOMKilled", st, err)
	}
}
