package router

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// BenchmarkReserveCreate measures the quota check of a create with 10,000
// sandboxes of 100 tenants in the registry cache (it scans the cache).
func BenchmarkReserveCreate(b *testing.B) {
	s, err := New(Config{}, nil)
	if err == nil || s != nil {
		b.Fatal("New without a connection must fail")
	}
	s = &Service{cfg: Config{Bus: (Config{}).Bus.Defaults()}, sandboxes: map[string]events.Sandbox{},
		tenants: map[string]events.TenantRecord{}, live: map[string]*liveUsage{}, q: newQuotaState()}
	s.cfg.DefaultLimits = events.TenantLimits{MaxSandboxes: -1, MaxLifetimeS: -1}
	now := time.Now()
	for i := 0; i < 10000; i++ {
		id := "sb-" + strconv.Itoa(i)
		s.setSandboxLocked(id, &events.Sandbox{SandboxID: id, Tenant: "T" + strconv.Itoa(i%100), State: events.StateRunning,
			CreatedAt: now, Deadline: now.Add(time.Hour)})
	}
	c := caller{tenant: "T7", authed: true}
	if u := s.usage("T7"); u.Sandboxes != 100 || u.LifetimeS != 100*3600 {
		b.Fatalf("usage %+v", u)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "new-" + strconv.Itoa(i)
		if e := s.reserveCreate(c, id, 60); e != nil {
			b.Fatal(e)
		}
		s.dropCreate(id)
	}
}

// TestLiveUsage: the per-tenant sums follow the registry cache through
// every state change, and a create in flight counts until the cache has it.
func TestLiveUsage(t *testing.T) {
	s := &Service{sandboxes: map[string]events.Sandbox{}, live: map[string]*liveUsage{}, q: newQuotaState()}
	now := time.Now()
	rec := func(id, tenant string, st events.State, life time.Duration) *events.Sandbox {
		return &events.Sandbox{SandboxID: id, Tenant: tenant, State: st, CreatedAt: now, Deadline: now.Add(life)}
	}
	steps := []struct {
		name        string
		apply       func()
		sandboxes   int
		lifetimeS   int64
		openTenants int
	}{
		{"in flight", func() { s.q.creates["a"] = &reservation{tenant: "T", lifetimeS: 60} }, 1, 60, 0},
		{"creating", func() { s.setSandboxLocked("a", rec("a", "T", events.StateCreating, time.Minute)) }, 1, 60, 0},
		{"running, the reply relayed and swept", func() {
			s.setSandboxLocked("a", rec("a", "T", events.StateRunning, time.Minute))
			delete(s.q.creates, "a")
		}, 1, 60, 0},
		{"extended", func() { s.setSandboxLocked("a", rec("a", "T", events.StateRunning, 2*time.Minute)) }, 1, 120, 0},
		{"another tenant", func() { s.setSandboxLocked("b", rec("b", "U", events.StateRunning, time.Hour)) }, 1, 120, 0},
		{"an open sandbox", func() { s.setSandboxLocked("c", rec("c", "", events.StateRunning, time.Hour)) }, 1, 120, 1},
		{"second", func() { s.setSandboxLocked("d", rec("d", "T", events.StateRunning, time.Minute)) }, 2, 180, 1},
		{"gone", func() { s.setSandboxLocked("a", rec("a", "T", events.StateGone, 2*time.Minute)) }, 1, 60, 1},
		{"expired", func() { s.setSandboxLocked("a", nil) }, 1, 60, 1},
		{"lost", func() { s.setSandboxLocked("d", rec("d", "T", events.StateLost, time.Minute)) }, 0, 0, 1},
	}
	for _, st := range steps {
		st.apply()
		u := s.usage("T")
		if u.Sandboxes != st.sandboxes || u.LifetimeS != st.lifetimeS {
			t.Fatalf("%s: usage %+v, want %d sandboxes and %d s", st.name, u, st.sandboxes, st.lifetimeS)
		}
		if o := s.usage(events.TenantOpen); o.Sandboxes != st.openTenants {
			t.Fatalf("%s: open usage %+v", st.name, o)
		}
	}
}

// TestStreamedExecCount: a streamed exec counts until its exit marker,
// also when the marker arrives before the reply; the sweep ends execs of
// sandboxes that ended.
func TestStreamedExecCount(t *testing.T) {
	now := time.Now()
	s := &Service{sandboxes: map[string]events.Sandbox{}, live: map[string]*liveUsage{}, tenants: map[string]events.TenantRecord{}, q: newQuotaState()}
	s.setSandboxLocked("sb", &events.Sandbox{SandboxID: "sb", Tenant: "T", State: events.StateRunning, CreatedAt: now, Deadline: now.Add(time.Hour)})
	c := caller{tenant: "T", authed: true}
	execs := func() int { return s.usage("T").Execs }
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"first exec forwarded", func() { _ = s.beginExec(c) }, 1},
		{"it started", func() { s.execStreaming("T", "sb", "p1", time.Time{}) }, 1},
		{"its exit marker", func() { s.onExit(events.LiveSubject("T", "sb", "p1", events.Exit)) }, 0},
		{"a stdout message is no exit", func() { _ = s.beginExec(c); s.onExit(events.LiveSubject("T", "sb", "p2", events.Stdout)) }, 1},
		{"exit before the reply", func() { s.onExit(events.LiveSubject("T", "sb", "p2", events.Exit)) }, 1},
		{"then the reply", func() { s.execStreaming("T", "sb", "p2", time.Time{}) }, 0},
		{"a third, streaming", func() { _ = s.beginExec(c); s.execStreaming("T", "sb", "p3", time.Time{}) }, 1},
		{"its bound passes", func() {
			s.q.streams[streamKey("T", "sb", "p3")].until = now.Add(-time.Second)
			s.sweepQuotas()
		}, 0},
		{"a fourth, streaming", func() { _ = s.beginExec(c); s.execStreaming("T", "sb", "p4", time.Time{}) }, 1},
		{"its sandbox ends", func() {
			s.setSandboxLocked("sb", &events.Sandbox{SandboxID: "sb", Tenant: "T", State: events.StateGone, CreatedAt: now, Deadline: now.Add(time.Hour)})
			s.sweepQuotas()
		}, 0},
	}
	for _, st := range steps {
		st.do()
		if got := execs(); got != st.want {
			t.Fatalf("%s: %d execs counted, want %d", st.name, got, st.want)
		}
	}
}

// fakeRequest is a micro.Request that records the error it is answered with.
type fakeRequest struct{ code string }

func (f *fakeRequest) Respond([]byte, ...micro.RespondOpt) error  { return nil }
func (f *fakeRequest) RespondJSON(any, ...micro.RespondOpt) error { return nil }
func (f *fakeRequest) Error(code, _ string, _ []byte, _ ...micro.RespondOpt) error {
	f.code = code
	return nil
}
func (f *fakeRequest) Data() []byte           { return nil }
func (f *fakeRequest) Headers() micro.Headers { return nil }
func (f *fakeRequest) Subject() string        { return "" }
func (f *fakeRequest) Reply() string          { return "" }

// TestReplayBound: with maxReplays replays running, attach is refused
// with SBX_E1604 at once.
func TestReplayBound(t *testing.T) {
	s := &Service{replaySlots: make(chan struct{}, maxReplays)}
	for i := 0; i < maxReplays; i++ {
		s.replaySlots <- struct{}{}
	}
	req := &fakeRequest{}
	s.attach(req, caller{tenant: "T", authed: true}, &events.AttachRequest{SandboxID: "sb", ProcessID: "p", Nonce: "n"})
	if want := strconv.Itoa(events.CodeOverloaded.Number()); req.code != want {
		t.Fatalf("attach past the bound answered %q, want %s", req.code, want)
	}
}
