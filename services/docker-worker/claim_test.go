//go:build integration

package dockerworker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// TestPoolClaimHousekeepingAfterFirstExec: a warm claim's housekeeping (the
// root Docker exec that saves the sandbox's deadline, the pool's refill)
// waits for the sandbox's first exec, so that exec does not share the host's
// CPU with them; without an exec it runs on its own, soon.
func TestPoolClaimHousekeepingAfterFirstExec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		settle time.Duration
		exec   bool
	}{
		{name: "after the first exec", settle: time.Hour, exec: true},
		{name: "without an exec", settle: 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBackend(t, Config{Pools: []PoolConfig{{Class: "base", Image: baseImage, Size: 1}}})
			b.claimSettle = tc.settle
			ctx := context.Background()
			eventually(t, 60*time.Second, "pool filled", func() bool { return b.PoolIdle()["base"] == 1 })
			spec := newSpec()
			if _, err := b.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			sb := b.lookupCached(spec.SandboxID)
			if !sb.fromPool || sb.agentOf() == nil {
				t.Fatalf("not a pool member with an agent: from pool %t", sb.fromPool)
			}
			// Other workers' janitors (this package's other tests) may read
			// the deadline file: only its content tells the save happened.
			summary := container.Summary{ID: sb.containerID, State: "running", Labels: map[string]string{LabelSandbox: spec.SandboxID}}
			saved := func() bool {
				d, ok := b.savedDeadline(ctx, summary)
				return ok && d.Equal(spec.Deadline)
			}
			if tc.exec {
				// Must not happen: a bounded wait for it (it began within
				// milliseconds of the claim before the change).
				err := poll.Until(ctx, time.Second, poll.Bool("housekeeping before the first exec", func() bool {
					return saved() || b.PoolIdle()["base"] > 0
				}))
				if err == nil {
					t.Fatalf("the claim's housekeeping ran before the sandbox's first exec (idle members %d)", b.PoolIdle()["base"])
				}
				sh(t, b, spec.SandboxID, "true")
			}
			eventually(t, 30*time.Second, "the deadline saved", saved)
			eventually(t, 60*time.Second, "pool refilled", func() bool { return b.PoolIdle()["base"] == 1 })
		})
	}
}

// TestPoolMemberIsWarm: an idle pool member has already run a process
// through its agent (warmUp), so a claimed sandbox's first exec is not the
// container's first (cold rootfs lookups, the agent's first fork: ≈ 2.5 ms of
// a warm claim's time to interactive). Seen from the claimed sandbox's first
// exec: its parent, the agent, has reaped a child before it, whose page
// faults it counts (cminflt, /proc/PID/stat's 11th field); a member with no
// exec before has none.
func TestPoolMemberIsWarm(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Pools: []PoolConfig{{Class: "base", Image: baseImage, Size: 1}}})
	ctx := context.Background()
	eventually(t, 60*time.Second, "pool filled", func() bool { return b.PoolIdle()["base"] == 1 })
	spec := newSpec()
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	sb := b.lookupCached(spec.SandboxID)
	if !sb.fromPool || sb.agentOf() == nil {
		t.Fatalf("not a pool member with an agent: from pool %t", sb.fromPool)
	}
	out := sh(t, b, spec.SandboxID, `set -- $(cat /proc/$PPID/stat); echo $2 ${11}`)
	comm, faults, _ := strings.Cut(out, " ")
	if comm != "(sbx-agent)" {
		t.Fatalf("the first exec's parent is %q, not the agent", comm)
	}
	if n, err := strconv.Atoi(faults); err != nil || n == 0 {
		t.Fatalf("the claimed sandbox's first exec is its container's first (agent's children's faults %q): the pool member was not warmed up", faults)
	}
}
