package worker

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestClassifyNeverHandsOutASentinel: a backend returning a package
// sentinel (directly or wrapped) gets a copy back, so that rewriting the
// message (redaction in runProcess) cannot race on or change the global.
// Run with -race: before the fix the concurrent writes below raced on
// events.ErrSandboxGone.Message.
func TestClassifyNeverHandsOutASentinel(t *testing.T) {
	want := events.ErrSandboxGone.Message
	for _, err := range []error{
		events.ErrSandboxGone,
		fmt.Errorf("wrapped: %w", events.ErrSandboxGone),
		events.ErrInvalidValue.With("field", "x"),
	} {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := classify(err)
				e.Message = Redact(e.Message+" secret-value", []string{"secret-value"})
				if e.Details != nil {
					e.Details["mutated"] = true
				}
			}()
		}
		wg.Wait()
		if e := classify(err); e == events.ErrSandboxGone || e.Code == "" {
			t.Fatalf("classify(%v) = %p, the sentinel itself", err, e)
		}
	}
	if events.ErrSandboxGone.Message != want {
		t.Fatalf("the sentinel's message was changed to %q", events.ErrSandboxGone.Message)
	}
	if _, ok := events.ErrInvalidValue.Details["mutated"]; ok {
		t.Fatal("the sentinel's details were changed")
	}
}
