package agent

import (
	"context"
	"testing"
)

// BenchmarkLocalExec: exec of `true` through a real agent server over an
// in-process pipe (no container, no daemon): the agent's own cost.
func BenchmarkLocalExec(b *testing.B) {
	c := realPair(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"/bin/true"}}); err != nil || ex.Code != 0 {
			b.Fatal(ex, err)
		}
	}
}

func BenchmarkLocalPing(b *testing.B) {
	c := realPair(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
