package agent

import (
	"context"
	"runtime"
	"testing"
)

// TestExecAllocatesLittle: an exec of `true` through a real agent (over an
// in-process pipe: both ends count) allocates a few KiB, not the two 256 KiB
// pump buffers of a fresh exec (they are recycled), which made the agent's
// small heap collect every few execs.
func TestExecAllocatesLittle(t *testing.T) {
	if raceOn {
		t.Skip("the race detector drops sync.Pool items on purpose")
	}
	c := realPair(t)
	ctx := context.Background()
	run := func() {
		if ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/true"}}); err != nil || ex.Code != 0 {
			t.Fatal(ex, err)
		}
	}
	run() // the pool's first buffers
	const n = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		run()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per exec", per)
	if per > 128<<10 {
		t.Errorf("an exec of true allocates %d bytes; want under 128 KiB", per)
	}
}
