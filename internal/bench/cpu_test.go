package bench

import (
	"os"
	"testing"
	"time"
)

// TestCPUPerOp: a process's CPU time is read from /proc and divided by the
// operations of a series; unknown processes are left out.
func TestCPUPerOp(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, ok := cpuTime(os.Getpid()); !ok {
		t.Fatal("cpuTime of this process: unknown")
	}
	if _, ok := cpuTime(-1); ok {
		t.Fatal("cpuTime of pid -1 known")
	}
	for _, tc := range []struct {
		name          string
		before, after map[string]time.Duration
		ops           int
		want          map[string]float64
	}{
		{"two processes", map[string]time.Duration{"router": time.Second, "worker": 0},
			map[string]time.Duration{"router": 3 * time.Second, "worker": 500 * time.Millisecond}, 1000,
			map[string]float64{"router": 2000, "worker": 500}},
		{"gone after", map[string]time.Duration{"dev": time.Second}, nil, 10, map[string]float64{}},
		{"no operations", map[string]time.Duration{"dev": time.Second}, map[string]time.Duration{"dev": 2 * time.Second}, 0, nil},
		{"no processes", nil, nil, 10, nil},
	} {
		got := cpuPerOp(tc.before, tc.after, tc.ops)
		if len(got) != len(tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s %v, want %v", tc.name, k, got[k], v)
			}
		}
	}
}
