package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// The router's caches (registry, leases, tenants) come from KV watches. A
// watch can end on its own (the server deleted its consumer, a reset that
// failed, a stream that was recreated): keepWatching opens it again with a
// backoff, and after each restart forgets the keys the new initial values
// no longer hold (a delete while no watch ran would otherwise stay unseen).

const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// cacheWatch is one cache the router keeps from a bucket.
type cacheWatch struct {
	name  string
	kv    jetstream.KeyValue
	ready chan<- struct{} // closed after the first initial values; may be nil
	// apply applies one entry (a put, a delete or a purge).
	apply func(jetstream.KeyValueEntry)
	// forget removes from the cache every key not in keep (after a
	// restart's initial values).
	forget func(keep map[string]bool)
}

// keepWatching runs w until ctx ends, restarting it whenever it ends.
func (s *Service) keepWatching(ctx context.Context, w cacheWatch) {
	backoff := watchBackoffMin
	for restart := false; ctx.Err() == nil; restart = true {
		if restart {
			s.log.Warn("cache watch ended; restarting", "watch", w.name, "after", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, watchBackoffMax)
		}
		kw, err := w.kv.WatchAll(ctx)
		if err != nil {
			s.log.Warn("cache watch not opened", "watch", w.name, slog.Any("err", err))
			continue
		}
		s.setWatcher(w.name, kw)
		if s.watchOnce(kw, w, restart) {
			backoff = watchBackoffMin // it ran: the next failure starts over
		}
		_ = kw.Stop()
	}
}

// watchOnce applies one watch's updates until it ends; it reports whether
// the watch delivered its initial values.
func (s *Service) watchOnce(kw jetstream.KeyWatcher, w cacheWatch, restart bool) bool {
	initial, seen := true, map[string]bool{}
	for e := range kw.Updates() {
		if e == nil {
			if initial && restart && w.forget != nil {
				w.forget(seen)
			}
			initial = false
			closeOnce(w.ready)
			continue
		}
		if initial && e.Operation() == jetstream.KeyValuePut {
			seen[e.Key()] = true
		}
		w.apply(e)
	}
	return !initial
}

// setWatcher remembers the current watcher of a cache (for tests that end
// it, stopWatch).
func (s *Service) setWatcher(name string, kw jetstream.KeyWatcher) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.watchers == nil {
		s.watchers = map[string]jetstream.KeyWatcher{}
	}
	s.watchers[name] = kw
}

// Names of the router's cache watches.
const (
	watchRegistryName = "registry"
	watchLeasesName   = "leases"
	watchTenantsName  = "tenants"
)

func (s *Service) registryWatch(ready chan<- struct{}) cacheWatch {
	return cacheWatch{name: watchRegistryName, kv: s.registry, ready: ready,
		apply: func(e jetstream.KeyValueEntry) {
			if testHookRegistryApply != nil {
				testHookRegistryApply()
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.registryRev.Store(e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				s.setSandboxLocked(e.Key(), nil)
				return
			}
			var rec events.Sandbox
			if json.Unmarshal(e.Value(), &rec) == nil {
				s.setSandboxLocked(e.Key(), &rec)
			}
		},
		forget: func(keep map[string]bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for id := range s.sandboxes {
				if !keep[id] {
					s.setSandboxLocked(id, nil)
				}
			}
		}}
}

func (s *Service) leaseWatch() cacheWatch {
	return cacheWatch{name: watchLeasesName, kv: s.leaseKV,
		apply: func(e jetstream.KeyValueEntry) {
			if e.Operation() != jetstream.KeyValuePut {
				s.mu.Lock()
				delete(s.leases, e.Key())
				s.mu.Unlock()
				s.failWorker(e.Key())
				return
			}
			var l events.WorkerLease
			if json.Unmarshal(e.Value(), &l) == nil {
				s.mu.Lock()
				prev, had := s.leases[e.Key()]
				s.leases[e.Key()] = l
				s.mu.Unlock()
				if had && restarted(prev, l) {
					s.failRestarted(e.Key(), l)
				}
			}
		},
		forget: func(keep map[string]bool) {
			var gone []string
			s.mu.Lock()
			for k := range s.leases {
				if !keep[k] {
					delete(s.leases, k)
					gone = append(gone, k)
				}
			}
			s.mu.Unlock()
			for _, k := range gone {
				s.failWorker(k)
			}
		}}
}

func (s *Service) tenantWatch(ready chan<- struct{}) cacheWatch {
	return cacheWatch{name: watchTenantsName, kv: s.tenantsKV, ready: ready,
		apply: s.applyTenant,
		forget: func(keep map[string]bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for k := range s.tenants {
				if !keep[k] {
					delete(s.tenants, k)
				}
			}
		}}
}
