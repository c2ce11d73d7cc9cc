package worker

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestTrackedGoroutinesAtShutdown (issue 22 E.26): a backend's reports
// (a sandbox died, the janitor reaped one) start tracked goroutines from
// the backend's own goroutine, which nothing orders with the worker's
// shutdown: the WaitGroup's Add raced its Wait ("WaitGroup is reused",
// "Add called concurrently with Wait", or a race report under -race).
// Every goroutine started is waited for, or refused once the worker has
// drained.
func TestTrackedGoroutinesAtShutdown(t *testing.T) {
	for range 50 {
		w := &Worker{cfg: Config{ShutdownGrace: 30 * time.Second}, log: slog.New(slog.DiscardHandler), sandboxes: map[string]*sandbox{}}
		var started, finished atomic.Int64
		refused := make(chan struct{})
		go func() { // the backend's event goroutine, reporting until refused
			defer close(refused)
			for {
				ran := make(chan struct{})
				if !w.goTracked(func() { finished.Add(1); close(ran) }) {
					return
				}
				started.Add(1)
				<-ran
			}
		}()
		start := time.Now()
		w.drain()
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("drain took %s: it did not see the group empty", d)
		}
		if s, f := started.Load(), finished.Load(); f < s {
			t.Fatalf("drain returned with %d of %d goroutines still running", s-f, s)
		}
		select {
		case <-refused:
		case <-time.After(10 * time.Second):
			t.Fatal("goroutines still start after drain returned")
		}
		if w.goTracked(func() { t.Error("ran after drain") }) {
			t.Fatal("a goroutine started after drain returned")
		}
	}
}
