package worker

import (
	"sync"
	"time"
)

// tracked counts the goroutines the worker starts, so that Run waits for
// them. It replaces a sync.WaitGroup, whose Add may not race its Wait
// while the count is zero: goroutines are also started from the backend's
// own goroutines (a sandbox died, the janitor reaped one), which nothing
// orders with the shutdown. Here a start and the wait's close take the
// same lock: a goroutine starts while the group is open, or while one of
// its goroutines still runs (work in flight may start more, and the wait
// covers them); once the group is closed and empty it stays empty, and a
// start is refused.
type tracked struct {
	mu      sync.Mutex
	running int
	closed  bool
	empty   chan struct{} // closed once closed and no goroutine runs
}

// start runs f on a goroutine of the group and reports whether it did.
func (g *tracked) start(f func()) bool {
	g.mu.Lock()
	if g.closed && g.running == 0 {
		g.mu.Unlock()
		return false
	}
	g.running++
	g.mu.Unlock()
	go func() {
		defer g.done()
		f()
	}()
	return true
}

func (g *tracked) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.closed && g.running == 0 {
		close(g.empty)
	}
}

// close closes the group and returns a channel closed once no goroutine
// of it runs.
func (g *tracked) close() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.empty = make(chan struct{})
		if g.running == 0 {
			close(g.empty)
		}
	}
	return g.empty
}

// waitClosed waits for ch at most d and reports whether it was closed.
func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
