package dockerworker

import (
	"context"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// semaphore bounds concurrent operations with a bounded wait for a slot.
type semaphore struct{ slots chan struct{} }

func newSemaphore(n int) *semaphore { return &semaphore{slots: make(chan struct{}, n)} }

// acquire waits at most wait for a slot; it fails with Overloaded
// (retryable) when none frees up, or with ctx's error.
func (s *semaphore) acquire(ctx context.Context, wait time.Duration, what string) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-t.C:
		return events.Errorf(events.CodeOverloaded, "%d concurrent %s on this host; none finished within %s", cap(s.slots), what, wait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *semaphore) release() { <-s.slots }
