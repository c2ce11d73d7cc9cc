package router

import (
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
