package sbxtest_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// BenchmarkExecLatency measures one non-streamed exec through the whole
// path (client -> router -> JetStream -> worker -> router -> client) with
// the fake backend, one at a time, and reports p50 and p99.
func BenchmarkExecLatency(b *testing.B) {
	env := sbxtest.Start(b, sbxtest.Options{})
	ctx := context.Background()
	sb := env.Create(ctx)
	req := events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}}
	for i := 0; i < 200; i++ { // warm up
		if _, err := env.Client.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := env.Client.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkExecThroughput runs execs from many concurrent clients and
// reports execs per second, for 1 and 2 router and worker instances.
func BenchmarkExecThroughput(b *testing.B) {
	for _, shape := range []struct{ routers, workers, clients int }{{1, 1, 64}, {2, 1, 64}, {1, 2, 64}, {2, 2, 64}} {
		b.Run(fmt.Sprintf("routers=%d/workers=%d/clients=%d", shape.routers, shape.workers, shape.clients), func(b *testing.B) {
			env := sbxtest.Start(b, sbxtest.Options{Routers: shape.routers, Workers: shape.workers})
			ctx := context.Background()
			// One sandbox per worker would pin load; sandboxes land on
			// whichever worker pulls the create, so make several.
			var ids []string
			for i := 0; i < 8; i++ {
				ids = append(ids, env.Create(ctx).SandboxID)
			}
			clients := make([]*client.Client, 8)
			for i := range clients {
				c, err := client.New(env.Conn(fmt.Sprintf("bench-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				clients[i] = c
			}
			var next atomic.Int64
			var failed atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < shape.clients; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := clients[g%len(clients)]
					req := events.ExecRequest{SandboxID: ids[g%len(ids)], Cmd: []string{"echo", "hi"}}
					for next.Add(1) <= int64(b.N) {
						if _, err := c.Exec(ctx, req); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d execs failed", f)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "execs/s")
		})
	}
}

// BenchmarkStream measures streamed output from the fake backend to a Go
// client: every byte read, order checked by sequence, none lost.
func BenchmarkStream(b *testing.B) {
	env := sbxtest.Start(b, sbxtest.Options{})
	ctx := context.Background()
	sb := env.Create(ctx)
	const size = 64 << 20
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"write", fmt.Sprint(size), "65536"}})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		var lastSeq uint64
		for {
			c, err := p.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if c.Missing != 0 || c.Seq != lastSeq+1 {
				b.Fatalf("chunk %d after %d (%d missing)", c.Seq, lastSeq, c.Missing)
			}
			lastSeq = c.Seq
			n += int64(len(c.Data))
		}
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
		if n != size {
			b.Fatalf("read %d bytes, want %d", n, size)
		}
	}
}
