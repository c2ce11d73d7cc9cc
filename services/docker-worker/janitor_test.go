//go:build integration

package dockerworker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// crash stops a backend's goroutines without removing anything, as a
// worker process killed with SIGKILL would.
func crash(b *Backend) {
	b.stop()
	b.wg.Wait()
}

// leaveProbe creates, and never starts, a probe container as a crash
// mid-create leaves it.
func leaveProbe(t *testing.T, workerID string) string {
	t.Helper()
	raw := rawDocker(t)
	ctx := context.Background()
	name := probeNamePrefix + randID("")
	c, err := raw.ContainerCreate(ctx, &container.Config{Image: baseImage, Cmd: []string{"true"},
		Labels: map[string]string{LabelWorker: workerID, LabelProbe: "true"}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	return c.ID
}

func exists(t *testing.T, ref string) bool {
	t.Helper()
	_, err := rawDocker(t).ContainerInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	return err == nil
}

type reapLog struct {
	mu  sync.Mutex
	ids []string
}

func (r *reapLog) add(x worker.Reaped) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, x.SandboxID)
}

func (r *reapLog) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.ids, id)
}

// TestJanitorRemovesWhatOutlivedItsDeadline: the containers a crashed
// worker of another id left (no registry, no runtime needed) are removed by
// another worker's janitor: a sandbox past its deadline label, a probe left
// mid-create, an idle pool member past its own lifetime. A sandbox whose
// deadline set_timeout moved, and one whose deadline is ahead, stay.
func TestJanitorRemovesWhatOutlivedItsDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deadID := randID("dead-")
	dead := newTestBackend(t, Config{WorkerID: deadID, JanitorInterval: time.Hour, PoolMemberTTL: 4 * time.Second,
		// A shape no create below asks for: the creates go cold.
		Pools: []PoolConfig{{Class: "base", Image: baseImage, Size: 1, Resources: events.Resources{MemoryMB: 300}}}})
	eventually(t, 30*time.Second, "pool filled", func() bool { return dead.PoolIdle()["base"] == 1 })
	soon := func(s *worker.CreateSpec) { s.Deadline = time.Now().Add(time.Second).UTC() }
	expired := mustCreate(t, dead, soon)
	extended := mustCreate(t, dead, soon) // its label says soon
	ahead := mustCreate(t, dead)
	if err := dead.SetTimeout(ctx, extended, time.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	probe := leaveProbe(t, deadID)
	crash(dead)
	var member string
	for _, m := range dead.pool.idle {
		member = m[0].containerID
	}

	var reaped reapLog
	j := newTestBackend(t, Config{JanitorInterval: 200 * time.Millisecond, JanitorGrace: -1, ProbeMaxAge: time.Second})
	j.OnReap(reaped.add)
	start := time.Now()
	eventually(t, 30*time.Second, "the janitor removed the expired sandbox, the probe and the pool member", func() bool {
		return !exists(t, namePrefix+expired) && !exists(t, probe) && !exists(t, member)
	})
	t.Logf("removed within %s", time.Since(start).Round(time.Millisecond))
	if !reaped.has(expired) {
		t.Errorf("the removal of %s was not reported to the runtime: %v", expired, reaped.ids)
	}
	for _, id := range []string{extended, ahead} {
		if !exists(t, namePrefix+id) {
			t.Errorf("the janitor removed %s, whose deadline is ahead", id)
		}
	}
}

// TestStartupRemovesOwnProbes: a worker restarted with the same id removes
// the probe containers its predecessor left mid-create at once, without
// waiting for their age.
func TestStartupRemovesOwnProbes(t *testing.T) {
	id := randID("probe-")
	probe := leaveProbe(t, id)
	created := time.Now().Unix()
	// Docker dates containers to the second: the restart must come in a
	// later one than the probe for it to be the predecessor's.
	eventually(t, 3*time.Second, "the next second", func() bool { return time.Now().Unix() > created })
	newTestBackend(t, Config{WorkerID: id, JanitorInterval: time.Hour, ProbeMaxAge: time.Hour})
	eventually(t, 10*time.Second, "the probe removed at start-up", func() bool { return !exists(t, probe) })
}
