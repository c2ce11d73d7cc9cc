package router

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StopWatch ends the current watch of one of the router's caches
// ("registry", "leases", "tenants"), as the server would; false when none
// runs yet.
func StopWatch(s *Service, name string) bool {
	s.wmu.Lock()
	kw := s.watchers[name]
	s.wmu.Unlock()
	if kw == nil {
		return false
	}
	return kw.Stop() == nil
}

// Cached reports whether the registry cache holds a sandbox.
func Cached(s *Service, id string) bool {
	_, ok := s.cachedSandbox(id)
	return ok
}

// LeaseSeen is the heartbeat of the newest lease the cache holds.
func LeaseSeen(s *Service) time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var t time.Time
	for _, l := range s.leases {
		if l.HeartbeatAt.After(t) {
			t = l.HeartbeatAt
		}
	}
	return t
}

// WrapJetStream makes the routers started until the test ends use the
// JetStream context wrap returns (to inject publish faults).
func WrapJetStream(t testing.TB, wrap func(jetstream.JetStream) jetstream.JetStream) {
	testHookJetStream = wrap
	t.Cleanup(func() { testHookJetStream = nil })
}

// HoldRegistryLoad holds the registry cache's initial load of the routers
// started until release is called (Run serves after a second anyway).
// Call release before the routers stop.
func HoldRegistryLoad(t testing.TB) (release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	testHookRegistryApply = func() { <-hold }
	initialLoadWait = time.Second
	t.Cleanup(func() {
		release()
		testHookRegistryApply = nil
		initialLoadWait = 30 * time.Second
	})
	return release
}

// SetOrphanObjectGrace sets how old an unknown sandbox's objects must be
// before the sweep deletes them, until the test ends.
func SetOrphanObjectGrace(t testing.TB, d time.Duration) {
	prev := orphanObjectGrace
	orphanObjectGrace = d
	t.Cleanup(func() { orphanObjectGrace = prev })
}

// SweepTicks reports each sweep tick of the routers started until the test
// ends: whether the sweep ran (ticks the reader misses are dropped).
func SweepTicks(t testing.TB) <-chan bool {
	ch := make(chan bool, 16)
	testHookSweepTick = func(swept bool) {
		select {
		case ch <- swept:
		default:
		}
	}
	t.Cleanup(func() { testHookSweepTick = nil })
	return ch
}

// HoldFilesLoad holds the files watch's initial load of the routers
// started until release is called, and makes a files.put wait for it at
// most wait. Call release before the routers stop.
func HoldFilesLoad(t testing.TB, wait time.Duration) (release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	testHookFilesLoad = func() { <-hold }
	prev := filesLoadWait
	filesLoadWait = wait
	t.Cleanup(func() {
		release()
		testHookFilesLoad = nil
		filesLoadWait = prev
	})
	return release
}
