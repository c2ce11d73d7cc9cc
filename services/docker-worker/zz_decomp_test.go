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

func BenchmarkZZThroughput(b *testing.B) {
	env, _, _ := pathEnv(b, Config{})
	ctx := context.Background()
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = env.Create(ctx).SandboxID
	}
	cmd := []string{"true"}
	if c := os.Getenv("ZZ_CMD"); c != "" {
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
	fmt.Printf("execs/s %.1f\n", float64(n.Load())/time.Since(start).Seconds())
}
