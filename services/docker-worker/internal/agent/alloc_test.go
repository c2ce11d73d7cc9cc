package agent

import (
	"context"
	"runtime"
	"testing"
)

// TestExecAllocatesLittle: execs through a real agent (over an in-process
// pipe: both ends count) allocate a few KiB each, not the two 256 KiB pump
// buffers of a fresh exec (recycled in the agent), which made the agent's
// small heap collect every few execs; and streamed output is not allocated
// again chunk by chunk in the worker (its buffers are recycled too). The
// agent's replay log (ADR 18) keeps the last 6 MiB of each stream, so a big
// stream allocates that window, not its whole length: the chunks the log
// drops as it goes are recycled (it allocated 17.6 MB per 16 MiB exec
// before).
func TestExecAllocatesLittle(t *testing.T) {
	if raceOn {
		t.Skip("the race detector drops sync.Pool items on purpose")
	}
	c := realPair(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		argv []string
		out  int64
		most uint64 // bytes allocated per exec
	}{
		{name: "true", argv: []string{"/bin/true"}, most: 96 << 10},
		{name: "16 MiB of output", argv: []string{"head", "-c", "16777216", "/dev/zero"}, out: 16 << 20, most: 8 << 20},
		{name: "48 MiB of output", argv: []string{"head", "-c", "50331648", "/dev/zero"}, out: 48 << 20, most: 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func() {
				var n countingWriter
				if ex, err := c.Exec(ctx, ExecRequest{Argv: tc.argv, Stdout: &n}); err != nil || ex.Code != 0 || int64(n) != tc.out {
					t.Fatal(ex, err, n)
				}
			}
			run() // the pools' first buffers
			const n = 5
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				run()
			}
			runtime.ReadMemStats(&after)
			per := (after.TotalAlloc - before.TotalAlloc) / n
			t.Logf("%d bytes allocated per exec", per)
			if per > tc.most {
				t.Errorf("%s allocates %d bytes per exec; want at most %d", tc.name, per, tc.most)
			}
		})
	}
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
