package cli

import (
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalForcesExit: the first SIGTERM ends the context (a clean
// shutdown), the second calls force instead of being swallowed.
func TestSecondSignalForcesExit(t *testing.T) {
	forced := make(chan struct{})
	ctx, stop := signalContext(func() { close(forced) })
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not end the context")
	}
	select {
	case <-forced:
		t.Fatal("the first signal forced an exit")
	case <-time.After(50 * time.Millisecond):
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-forced:
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal was swallowed")
	}
}
