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
				l.join(us[i])
				got := l.take(us[i], 1<<20, tc.share)
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
			l.leave(us[0])
			if got := l.take(us[0], 1, tc.share); got != 0 {
				t.Errorf("a sandbox that left got %d", got)
			}
		})
	}
}
