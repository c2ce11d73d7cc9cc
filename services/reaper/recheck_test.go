package reaper

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestLostWorkerGrace: a lease that disappears (clean-shutdown delete or
// expiry) and comes back within LostGrace, as a worker restarted with the
// same id does, leaves the worker's sandboxes, queued commands and consumer
// alone; one that stays gone past the grace gets them marked lost, purged
// and deleted.
func TestLostWorkerGrace(t *testing.T) {
	const grace = 1500 * time.Millisecond
	tests := []struct {
		name     string
		expire   bool // let the lease expire instead of deleting it
		restart  bool // the worker comes back (same id) within the grace
		wantLost bool
	}{
		{name: "deleted, back within grace", restart: true},
		{name: "expired, back within grace", expire: true, restart: true},
		{name: "deleted, gone past grace", wantLost: true},
		{name: "expired, gone past grace", expire: true, wantLost: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t)
			w := startWorker(t, e, "w", false) // holds a consumer, never consumes
			now := time.Now()
			ids := []string{"sbx-1", "sbx-2"}
			for _, id := range ids {
				putSandbox(t, e, id, "w", now.Add(time.Hour), now.Add(-time.Hour))
			}
			queueCommand(t, e, "w")
			var h hookLog
			s, _ := runReaper(t, e.nc, Config{InstanceID: "r", LostGrace: grace}, h.hook)
			eventually(t, 5*time.Second, "active", s.Active)

			key := events.WorkerKey("fake", "w")
			w.stopLease()
			if !tc.expire {
				if err := e.wkv.Delete(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 5*time.Second, "lease-gone event", func() bool { return h.count(hookLeaseGone, key) > 0 })
			if tc.restart {
				startWorker(t, e, "w", false)
			}
			eventually(t, grace+5*time.Second, "decision after the grace", func() bool {
				return h.count(hookWorkerBack, key)+h.count(hookWorkerLost, key) > 0
			})
			if got := h.count(hookWorkerLost, key) > 0; got != tc.wantLost {
				t.Fatalf("handled as lost: %v, want %v", got, tc.wantLost)
			}

			wantState := events.StateRunning
			if tc.wantLost {
				wantState = events.StateLost
			}
			for _, id := range ids {
				if sb, _ := getSandbox(t, e, id); sb.State != wantState {
					t.Errorf("%s is %s, want %s", id, sb.State, wantState)
				}
			}
			if got := consumerExists(t, e, "w"); got == tc.wantLost {
				t.Errorf("consumer exists: %v", got)
			}
			wantQueued := uint64(1)
			if tc.wantLost {
				wantQueued = 0
			}
			if n := queuedCommands(t, e, "w"); n != wantQueued {
				t.Errorf("%d queued commands, want %d", n, wantQueued)
			}
			wantRecords := 0
			if tc.wantLost {
				wantRecords = len(ids)
			}
			eventually(t, 5*time.Second, "lost records", func() bool { return len(records(t, e, KindLost)) == wantRecords })
		})
	}
}

// TestSweepActsOnCurrentRecord: Sweep decides from a snapshot but acts on
// what the registry and the leases say when it acts. The hook runs right
// after the snapshot.
func TestSweepActsOnCurrentRecord(t *testing.T) {
	const id = "sbx-x"
	tests := []struct {
		name       string
		worker     string // "w1" holds a lease; "w2" does not
		change     func(t *testing.T, e *env, sb events.Sandbox)
		wantKill   bool
		wantState  events.State
		wantKind   string
		wantAction string
	}{
		{name: "past deadline, unchanged", worker: "w1",
			wantKill: true, wantState: events.StateGone, wantKind: FindingExpired, wantAction: reapKilled},
		{name: "deadline extended after the snapshot", worker: "w1",
			change: func(t *testing.T, e *env, sb events.Sandbox) {
				sb.Deadline = time.Now().Add(time.Hour) // set_timeout
				putRecord(t, e, sb)
			},
			wantState: events.StateRunning, wantKind: FindingExpired, wantAction: reapNotDue},
		{name: "ended after the snapshot", worker: "w1",
			change: func(t *testing.T, e *env, sb events.Sandbox) {
				end := time.Now().UTC()
				sb.State, sb.EndedAt, sb.EndReason = events.StateGone, &end, "killed"
				putRecord(t, e, sb)
			},
			wantState: events.StateGone, wantKind: FindingExpired, wantAction: reapEnded},
		{name: "no lease", worker: "w2",
			wantState: events.StateLost, wantKind: FindingLost, wantAction: "marked lost"},
		{name: "lease back after the snapshot", worker: "w2",
			change:    func(t *testing.T, e *env, sb events.Sandbox) { startWorker(t, e, "w2", false) },
			wantState: events.StateRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t)
			w := startWorker(t, e, "w1", true)
			now := time.Now()
			sb := events.Sandbox{SandboxID: id, Backend: "fake", Worker: tc.worker, State: events.StateRunning,
				CreatedAt: now.Add(-time.Hour), Deadline: now.Add(-time.Second)}
			if tc.worker == "w2" {
				sb.Deadline = now.Add(time.Hour)
			}
			putRecord(t, e, sb)

			s, err := New(Config{InstanceID: "cli"}, e.nc)
			if err != nil {
				t.Fatal(err)
			}
			s.hook = func(point, _ string) {
				if point == hookSweepListed && tc.change != nil {
					tc.change(t, e, sb)
				}
			}
			rep, err := s.Sweep(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors() != 0 {
				t.Errorf("sweep errors: %+v", rep.Findings)
			}
			var got []Finding
			for _, f := range rep.Findings {
				if f.SandboxID == id {
					got = append(got, f)
				}
			}
			switch {
			case tc.wantKind == "" && len(got) != 0:
				t.Errorf("findings %+v, want none", got)
			case tc.wantKind != "" && (len(got) != 1 || got[0].Kind != tc.wantKind || got[0].Action != tc.wantAction):
				t.Errorf("findings %+v, want one %s -> %s", got, tc.wantKind, tc.wantAction)
			}
			if _, killed := w.killed(id); killed != tc.wantKill {
				t.Errorf("killed: %v, want %v", killed, tc.wantKill)
			}
			if cur, _ := getSandbox(t, e, id); cur.State != tc.wantState {
				t.Errorf("state %s, want %s", cur.State, tc.wantState)
			}
		})
	}
}

// TestNoOverlapOnFailover: when a standby becomes active, the instance it
// replaces already reports inactive (and has cancelled its active work),
// whether the old one crashed or stopped cleanly.
func TestNoOverlapOnFailover(t *testing.T) {
	tests := []struct {
		name string
		how  string // what happens to a
	}{
		{name: "crash", how: "close"},
		{name: "partition", how: "cut"}, // requests hang: refreshes time out
		{name: "clean stop", how: "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t)
			p := &partition{srv: e.srv.Server}
			ncA, err := e.srv.Connect("reaper-a", nats.InProcessServer(p))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ncA.Close)
			a, stopA := runReaper(t, ncA, Config{InstanceID: "a"})
			eventually(t, 5*time.Second, "a active", a.Active)

			var h hookLog
			b, _ := runReaper(t, connect(t, e.srv, "reaper-b"), Config{InstanceID: "b"}, func(point, key string) {
				if point == hookActivating && a.Active() {
					h.hook("overlap", key)
				}
				h.hook(point, key)
			})
			switch tc.how {
			case "close":
				ncA.Close() // a cannot refresh nor give the role up
			case "cut":
				p.cut.Store(true)
			case "stop":
				stopA()
			}
			eventually(t, 5*time.Second, "b takes over", b.Active)
			if h.count("overlap", "b") != 0 {
				t.Fatal("b became active while a still reported active")
			}
			if a.Active() {
				t.Fatal("a still active")
			}
		})
	}
}
