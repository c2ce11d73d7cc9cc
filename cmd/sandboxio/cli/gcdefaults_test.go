package cli

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestDevGCDefaultsYieldToTheEnvironment(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	prevLim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLim) })
	cases := []struct {
		name    string
		env     map[string]string
		wantGC  int
		wantLim int64
	}{
		{name: "unset", env: nil, wantGC: devGCPercent, wantLim: devMemoryLimit},
		{name: "GOGC set", env: map[string]string{"GOGC": "100"}, wantGC: 100, wantLim: devMemoryLimit},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "off"}, wantGC: devGCPercent, wantLim: math.MaxInt64},
		{name: "both set", env: map[string]string{"GOGC": "100", "GOMEMLIMIT": "off"}, wantGC: 100, wantLim: math.MaxInt64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			applyDevGCDefaults(func(k string) string { return c.env[k] })
			if got := debug.SetGCPercent(100); got != c.wantGC {
				t.Errorf("GC percent %d, want %d", got, c.wantGC)
			}
			if got := debug.SetMemoryLimit(-1); got != c.wantLim {
				t.Errorf("memory limit %d, want %d", got, c.wantLim)
			}
		})
	}
}
