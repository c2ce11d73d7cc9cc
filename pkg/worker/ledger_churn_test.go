package worker_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestChurnedFloodsCannotEvict: a tenant that floods SBX_OUT from one
// sandbox after another, killing each once cut at its share, does not
// evict a live sandbox's older output either. A sandbox that leaves takes
// its share back, but its output stays in the stream (for late readers,
// within MaxAge): the ledger keeps counting it until the worker, needing
// room, purges the departed output itself, oldest first, so that
// DiscardOld never has to evict (and would evict the oldest, the victim's).
func TestChurnedFloodsCannotEvict(t *testing.T) {
	const (
		streamBytes = 4 << 20
		rounds      = 6
		victimBytes = 64 << 10
	)
	r := newFloodRig(t, streamBytes, victimBytes)
	total := 0
	for i := range rounds {
		id := r.create()
		_, got, res, err := r.stream(id, streamBytes)
		if err == nil && res != nil && res.Err != nil {
			err = res.Err
		}
		if err != nil && !errors.Is(err, events.ErrOutputShareExceeded) {
			t.Fatalf("round %d: %v", i, err)
		}
		total += got
		if _, err := r.env.Client.Kill(r.ctx, id); err != nil {
			t.Fatalf("round %d: kill: %v", i, err)
		}
	}
	if total <= streamBytes {
		t.Fatalf("the floods published %d bytes, not more than the stream holds: the test proves nothing", total)
	}
	r.victimKept(strconv.Itoa(rounds)+" sandboxes flooding one after another", total)
}
