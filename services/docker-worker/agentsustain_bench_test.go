//go:build integration

package dockerworker

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// BenchmarkAgentSustained: 8 clients, one runc sandbox each on the socket
// channel, running SBX_BENCH_CMD (default `true`) for 10 s through the whole
// path. It prints READY when the sandboxes are up, so that a script can
// sample the agents' and fuse-overlayfs's CPU while it runs
// (scripts/agent-cpu-ab.sh; docs/benchmarks.md, ADR 26).
func BenchmarkAgentSustained(b *testing.B) {
	env, _, _ := pathEnv(b, Config{})
	ctx := context.Background()
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = env.Create(ctx).SandboxID
	}
	cmd := []string{"true"}
	if c := os.Getenv("SBX_BENCH_CMD"); c != "" {
		cmd = []string{c}
	}
	fmt.Println("READY", time.Now().Format("15:04:05.000"))
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second)
	start := time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: ids[i], Cmd: cmd}); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	rate := float64(n.Load()) / time.Since(start).Seconds()
	fmt.Printf("execs/s %.1f\n", rate)
	b.ReportMetric(rate, "execs/s")
}
