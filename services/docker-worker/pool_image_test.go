//go:build integration

package dockerworker

import (
	"context"
	"testing"
	"time"
)

// TestPoolImageNormalised: a pool configured with an image in one spelling
// (no tag, or the registry's full name) warms members that a create naming
// the same image in another spelling takes.
func TestPoolImageNormalised(t *testing.T) {
	t.Parallel()
	cases := []struct{ pool, create string }{
		{"sandboxio/base", "sandboxio/base:latest"},
		{"docker.io/sandboxio/base:latest", "sandboxio/base"},
		{"sandboxio/base", ""}, // the default image
	}
	for _, c := range cases {
		t.Run(c.pool+"→"+c.create, func(t *testing.T) {
			t.Parallel()
			b := newTestBackend(t, Config{Pools: []PoolConfig{{Class: "base", Image: c.pool, Size: 1}}})
			eventually(t, 60*time.Second, "pool filled", func() bool { return b.PoolIdle()["base"] == 1 })
			spec := newSpec(withImage(c.create))
			if _, err := b.Create(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			if sb := b.lookupCached(spec.SandboxID); !sb.fromPool {
				t.Fatalf("pool %q, create %q: created cold, not from the pool", c.pool, c.create)
			}
		})
	}
}
