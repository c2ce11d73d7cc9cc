package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	handled := make(chan struct{})
	b.OnSandboxDeath(func(string, string) { sb.gone.Store(true); d.removed.Store(true); close(handled) })
	b.containerDied(dockerevents.Message{Actor: dockerevents.Actor{ID: "c1",
		Attributes: map[string]string{"name": namePrefix + id, "exitCode": "137"}}})
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the death handler did not run")
	}
	b.wg.Wait()
	lost := fmt.Errorf("%w: read: %w", agent.ErrUnavailable, io.EOF)
	if err := b.agentFailed(context.Background(), sb, lost); !errors.Is(err, events.ErrSandboxOOMKilled) {
		t.Fatalf("agent lost after the death was handled: %v, want SandboxOOMKilled", err)
	}
	if st, err := b.deathOf(sb); !errors.Is(err, events.ErrSandboxOOMKilled) || !st.OOMKilled {
		t.Fatalf("the Docker exec path's answer: %+v %v, want SandboxOOMKilled", st, err)
	}
}

// slowDaemon is oomDaemon whose inspect of the container "slow" answers only
// once release is closed, and counts the inspects of each container.
type slowDaemon struct {
	dockerAPI
	release chan struct{}
	mu      sync.Mutex
	inspect map[string]int
}

func (d *slowDaemon) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	d.mu.Lock()
	d.inspect[id]++
	d.mu.Unlock()
	if id == "slow" {
		select {
		case <-d.release:
		case <-ctx.Done():
			return container.InspectResponse{}, ctx.Err()
		}
	}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		State: &container.State{Status: "exited", OOMKilled: true, ExitCode: 137}}}, nil
}

// TestDeathsJudgedApart: judging one gVisor container's death (an inspect,
// and up to oomReportWait for the daemon's OOM report) does not hold up the
// report of another's; a second die event for a container being judged does
// not judge it again; each death is reported once, judged. Before, the
// events loop judged each death in turn: a burst of OOMs took a second each.
func TestDeathsJudgedApart(t *testing.T) {
	d := &slowDaemon{release: make(chan struct{}), inspect: map[string]int{}}
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(d.release) }) }) // a failure's judgement ends too
	b := &Backend{cli: d, log: slog.New(slog.DiscardHandler), sandboxes: map[string]*sandbox{}}
	ids := map[string]string{"slow": "01m9aaaaaaaaaaaaaaaaaaaaab", "fast": "01m9aaaaaaaaaaaaaaaaaaaaac"}
	for c, id := range ids {
		b.sandboxes[id] = &sandbox{id: id, containerID: c, runtime: RuntimeRunsc, procs: map[string]*process{}, died: make(chan struct{})}
	}
	reported := make(chan string, 4)
	b.OnSandboxDeath(func(id, _ string) { reported <- id })
	die := func(c string) {
		b.containerDied(dockerevents.Message{Actor: dockerevents.Actor{ID: c,
			Attributes: map[string]string{"name": namePrefix + ids[c], "exitCode": "137"}}})
	}
	done := make(chan struct{})
	go func() { // the events loop
		defer close(done)
		die("slow")
		die("slow") // the daemon's event again, while the first is judged
		die("fast")
	}()
	next := func(want, late string) {
		t.Helper()
		select {
		case id := <-reported:
			if id != ids[want] {
				t.Fatalf("reported %s, want the %s one", id, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal(late)
		}
	}
	next("fast", "a death waited for another's judgement")
	<-done
	release.Do(func() { close(d.release) })
	next("slow", "the slow death was never reported")
	b.wg.Wait()
	if len(reported) != 0 {
		t.Fatalf("a death reported twice: %s", <-reported)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inspect["slow"] != 1 {
		t.Fatalf("the slow container inspected %d times, want once", d.inspect["slow"])
	}
	for c, id := range ids {
		sb := b.sandboxes[id]
		if dd := sb.reportedDeath(); dd == nil || !errors.Is(dd.err, events.ErrSandboxOOMKilled) {
			t.Fatalf("%s: death not judged an OOM: %+v", c, dd)
		}
	}
}

// TestDieReason: a runc sandbox with the agent says the agent exited (and
// by which signal); runsc's code may be the runtime's own, so it stays the
// container's; an OOM is said.
func TestDieReason(t *testing.T) {
	msg := func(code, oom string) dockerevents.Message {
		return dockerevents.Message{Actor: dockerevents.Actor{Attributes: map[string]string{"exitCode": code, "oomKilled": oom}}}
	}
	for _, tc := range []struct {
		name string
		m    dockerevents.Message
		sb   *sandbox
		want string
	}{
		{"agent exits", msg("2", ""), &sandbox{hasAgent: true}, "agent exited: code 2"},
		{"agent killed", msg("137", ""), &sandbox{hasAgent: true}, "agent exited: code 137 (signal SIGKILL)"},
		{"agent OOM", msg("137", "true"), &sandbox{hasAgent: true}, "agent exited: code 137 (signal SIGKILL), killed by the OOM killer"},
		{"runsc", msg("2", ""), &sandbox{hasAgent: true, runtime: RuntimeRunsc}, "container died (exit code 2)"},
		{"no agent", msg("1", ""), &sandbox{}, "container died (exit code 1)"},
		{"unknown sandbox", msg("", ""), nil, "container died"},
	} {
		if got := dieReason(tc.m, tc.sb, ""); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
