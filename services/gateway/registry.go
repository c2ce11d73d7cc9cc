package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// registry is the gateway's copy of events.BucketRegistry, kept by a
// watch that is opened again whenever it ends. onChange is called, outside
// the lock, with a sandbox's previous and new record (nil when absent)
// whenever a key changes.
type registry struct {
	log      *slog.Logger
	onChange func(id string, old, cur *events.Sandbox)

	mu        sync.RWMutex
	sandboxes map[string]events.Sandbox
	ready     chan struct{} // closed after the first initial values
	readyOnce sync.Once
}

func newRegistry(log *slog.Logger, onChange func(id string, old, cur *events.Sandbox)) *registry {
	return &registry{log: log, onChange: onChange, sandboxes: map[string]events.Sandbox{}, ready: make(chan struct{})}
}

// get returns a sandbox's record.
func (r *registry) get(id string) (events.Sandbox, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sb, ok := r.sandboxes[id]
	return sb, ok
}

// loaded reports whether the first initial values are in.
func (r *registry) loaded() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// set stores (cur != nil) or removes a record and reports the change.
func (r *registry) set(id string, cur *events.Sandbox) {
	r.mu.Lock()
	old, had := r.sandboxes[id]
	if cur != nil {
		r.sandboxes[id] = *cur
	} else {
		delete(r.sandboxes, id)
	}
	r.mu.Unlock()
	var oldp *events.Sandbox
	if had {
		oldp = &old
	}
	if r.onChange != nil && (oldp != nil || cur != nil) {
		r.onChange(id, oldp, cur)
	}
}

const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// run opens the bucket (waiting for it to exist) and watches it until ctx
// ends.
func (r *registry) run(ctx context.Context, js jetstream.JetStream) {
	backoff := watchBackoffMin
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
		return true
	}
	var kv jetstream.KeyValue
	for kv == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		b, err := js.KeyValue(octx, events.BucketRegistry)
		cancel()
		if err == nil {
			kv = b
			break
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			r.log.Warn("registry bucket not opened", slog.Any("err", err))
		}
		if !wait() {
			return
		}
	}
	backoff = watchBackoffMin
	for restart := false; ctx.Err() == nil; restart = true {
		if restart {
			r.log.Warn("registry watch ended; restarting", "after", backoff)
			if !wait() {
				return
			}
		}
		kw, err := kv.WatchAll(ctx)
		if err != nil {
			r.log.Warn("registry watch not opened", slog.Any("err", err))
			continue
		}
		if r.watchOnce(kw, restart) {
			backoff = watchBackoffMin
		}
		_ = kw.Stop()
	}
}

// watchOnce applies one watch's updates until it ends; it reports whether
// the watch delivered its initial values.
func (r *registry) watchOnce(kw jetstream.KeyWatcher, restart bool) bool {
	initial, seen := true, map[string]bool{}
	for e := range kw.Updates() {
		if e == nil {
			if initial && restart {
				r.forget(seen)
			}
			initial = false
			r.readyOnce.Do(func() { close(r.ready) })
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			r.set(e.Key(), nil)
			continue
		}
		if initial {
			seen[e.Key()] = true
		}
		var rec events.Sandbox
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			r.log.Warn("registry record not decoded", "sandbox_id", e.Key(), slog.Any("err", err))
			continue
		}
		r.set(e.Key(), &rec)
	}
	return !initial
}

// forget removes every record not in keep (after a restarted watch's
// initial values: a delete while no watch ran).
func (r *registry) forget(keep map[string]bool) {
	r.mu.RLock()
	var gone []string
	for id := range r.sandboxes {
		if !keep[id] {
			gone = append(gone, id)
		}
	}
	r.mu.RUnlock()
	for _, id := range gone {
		r.set(id, nil)
	}
}

// exposure finds a published port in a record.
func exposure(sb events.Sandbox, port int) (events.PortExposure, bool) {
	for _, p := range sb.Ports {
		if p.Port == port {
			return p, true
		}
	}
	return events.PortExposure{}, false
}
