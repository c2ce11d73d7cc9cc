package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrNotYet is what Bool's conditions return while they are false.
var ErrNotYet = errors.New("not yet")

// Until calls f until it returns nil, ctx is done or within has passed,
// backing off from 5 ms to 100 ms between calls. It returns nil once f
// does, else f's last error wrapped with how long it waited.
func Until(ctx context.Context, within time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	start := time.Now()
	delay := 5 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("not within %s (waited %s): %w", within, time.Since(start).Round(time.Millisecond), err)
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// Eventually fails t unless f returns nil within the given time; the
// failure names f's last error.
func Eventually(t testing.TB, within time.Duration, f func() error) {
	t.Helper()
	// Not t.Context(): Eventually also runs in t.Cleanup, after that context ended. within bounds it.
	if err := Until(context.Background(), within, f); err != nil {
		t.Fatal(err)
	}
}

// Bool adapts a boolean condition to Eventually: it reports ErrNotYet
// wrapped with what while cond is false.
func Bool(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("%s: %w", what, ErrNotYet)
	}
}
