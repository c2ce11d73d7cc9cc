package worker

import "testing"

// TestOutputLedger: the shares of sandboxes that come one after another,
// each flooding, never add up past the budget; a sandbox that left frees
// what it held.
func TestOutputLedger(t *testing.T) {
	for _, tc := range []struct {
		name          string
		budget, share int64
		sandboxes     int
	}{
		{"one", 1000, 1 << 30, 1},
		{"arrivals", 1000, 1 << 30, 8},
		{"share below fair", 1000, 50, 8},
		{"no budget", 0, 300, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l outputLedger
			l.budget = tc.budget
			var total int64
			us := make([]*usage, tc.sandboxes)
			for i := range us {
				us[i] = new(usage)
				l.join(us[i], "t")
				got, _ := l.take(us[i], 1<<20, tc.share, -1)
				total += got
				if got > tc.share {
					t.Errorf("sandbox %d got %d, share %d", i, got, tc.share)
				}
			}
			if tc.budget > 0 && total > tc.budget {
				t.Errorf("%d granted, budget %d", total, tc.budget)
			}
			if tc.budget == 0 && total != tc.share*int64(tc.sandboxes) {
				t.Errorf("no budget: %d granted, want %d", total, tc.share*int64(tc.sandboxes))
			}
			l.leave(us[0], "")
			if got, _ := l.take(us[0], 1, tc.share, -1); got != 0 {
				t.Errorf("a sandbox that left got %d", got)
			}
		})
	}
}

// TestDepartedOutputIsPurgedForRoom: a sandbox that left with its output
// still in the stream keeps it counted; a grant that needs the room is
// handed the departed output to purge first (oldest first), and is granted
// once it is purged. Room the budget has without it needs no purge.
func TestDepartedOutputIsPurgedForRoom(t *testing.T) {
	var l outputLedger
	l.budget = 1000
	a, b, c := new(usage), new(usage), new(usage)
	l.join(a, "t")
	if g, d := l.take(a, 600, 1<<30, -1); g != 600 || d != nil {
		t.Fatalf("a: %d %v", g, d)
	}
	l.leave(a, "sbx.out.t.a.>")
	l.join(b, "t")
	if g, d := l.take(b, 300, 1<<30, -1); g != 300 || d != nil {
		t.Fatalf("b within the room left: %d %v, want 300 and no purge", g, d)
	}
	l.join(c, "t")
	g, d := l.take(c, 400, 1<<30, -1)
	if g != 0 || d == nil || d.filter != "sbx.out.t.a.>" || d.bytes != 600 {
		t.Fatalf("c past the room: %d %+v, want a's output to purge", g, d)
	}
	l.purged(d)
	if g, d := l.take(c, 400, 1<<30, -1); g != 400 || d != nil {
		t.Fatalf("c after the purge: %d %v", g, d)
	}
	if l.used != 700 {
		t.Fatalf("used %d, want 700 (b and c)", l.used)
	}
	// No departed output left: the fair share (1000 over 2 live) cuts.
	if g, d := l.take(c, 400, 1<<30, -1); g != 100 || d != nil {
		t.Fatalf("c at its share: %d %v, want 100", g, d)
	}
}

// TestTenantShares: a tenant past its share purges its own departed
// output first, then is cut; when the budget needs room, only departed
// output of a tenant storing at least as much as the asking one is purged.
func TestTenantShares(t *testing.T) {
	var l outputLedger
	l.budget = 1000
	b1, b2 := new(usage), new(usage)
	l.join(b1, "b")
	if g, _ := l.take(b1, 300, 1<<30, -1); g != 300 {
		t.Fatalf("b1: %d", g)
	}
	l.leave(b1, "sbx.out.b.1.>") // B's departed output: 300
	a1, a2 := new(usage), new(usage)
	l.join(a1, "a")
	if g, d := l.take(a1, 500, 1<<30, 400); g != 400 || d != nil || !a1.tenantCut.Load() {
		t.Fatalf("a1 at its tenant share: %d %v cut %t, want 400 and cut", g, d, a1.tenantCut.Load())
	}
	l.leave(a1, "sbx.out.a.1.>")
	l.join(a2, "a")
	g, d := l.take(a2, 100, 1<<30, 400)
	if g != 0 || d == nil || d.tenant != "a" {
		t.Fatalf("a2 past the tenant share: %d %+v, want A's own departed output to purge", g, d)
	}
	l.purged(d)
	if g, d := l.take(a2, 100, 1<<30, 400); g != 100 || d != nil {
		t.Fatalf("a2 after its purge: %d %v", g, d)
	}
	// B's 300 departed, A's 100 live. With the budget full, A may purge
	// the departed output of B, which stores more than A...
	l.budget = l.used
	if g, d := l.take(a2, 100, 1<<30, -1); g != 0 || d == nil || d.tenant != "b" {
		t.Fatalf("a2, budget full, B storing more: %d %+v, want B's departed output", g, d)
	}
	// ...but not once A stores more than B: then A is cut.
	l.budget = 2000
	b2 = new(usage)
	l.join(b2, "b")
	if g, _ := l.take(b2, 200, 1<<30, -1); g != 200 {
		t.Fatalf("b2: %d", g)
	}
	l.leave(b2, "sbx.out.b.2.>") // B: 300 (counted until purged) + 200 departed
	if g, _ := l.take(a2, 900, 1<<30, -1); g != 900 {
		t.Fatalf("a2: %d", g)
	}
	l.budget = l.used
	if g, d := l.take(a2, 100, 1<<30, -1); g != 0 || d != nil {
		t.Fatalf("a2, budget full, B storing less: %d %+v, want nothing purged", g, d)
	}
}
