package backendkit

import (
	"context"
	"sync"
	"time"
)

// Handles is what a backend holds of each sandbox it serves (its handle:
// the backend's own id, open connections), by sandboxio id. The zero value
// is empty and ready; it is safe for concurrent use.
type Handles[H any] struct {
	mu sync.Mutex
	m  map[string]H
}

// Get returns the handle of a sandbox.
func (h *Handles[H]) Get(id string) (H, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	return v, ok
}

// Put sets the handle of a sandbox.
func (h *Handles[H]) Put(id string, v H) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]H{}
	}
	h.m[id] = v
}

// Delete removes the handle of a sandbox and returns it.
func (h *Handles[H]) Delete(id string) (H, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	delete(h.m, id)
	return v, ok
}

// TakeAll removes every handle and returns them (a backend closing).
func (h *Handles[H]) TakeAll() []H {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]H, 0, len(h.m))
	for _, v := range h.m {
		out = append(out, v)
	}
	h.m = nil
	return out
}

// Adopt keeps v as the handle of a sandbox unless it has one already, and
// returns the handle kept and whether it is v.
func (h *Handles[H]) Adopt(id string, v H) (H, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.m[id]; ok {
		return cur, false
	}
	if h.m == nil {
		h.m = map[string]H{}
	}
	h.m[id] = v
	return v, true
}

// Lookup returns the handle of a sandbox. One this process does not hold
// (a sandbox created before a worker restart) comes from find, bounded by
// timeout: find looks the sandbox up at the backend and attaches to it, or
// returns the error to answer (SandboxGone when no sandbox of this worker
// holds it). When a concurrent Lookup adopted the sandbox first, the
// handle find made is given to discard (nil: dropped) and the first one is
// returned.
func (h *Handles[H]) Lookup(ctx context.Context, id string, timeout time.Duration, find func(ctx context.Context) (H, error), discard func(H)) (H, error) {
	if v, ok := h.Get(id); ok {
		return v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := find(ctx)
	if err != nil {
		var zero H
		return zero, err
	}
	kept, mine := h.Adopt(id, v)
	if !mine && discard != nil {
		discard(v)
	}
	return kept, nil
}
