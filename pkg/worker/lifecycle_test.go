package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// slowKill is the fake backend whose Kill waits until released: a
// container that takes its time to be removed.
type slowKill struct {
	*fake.Backend
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newSlowKill() *slowKill {
	return &slowKill{Backend: fake.New(fake.Config{}), entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowKill) Kill(ctx context.Context, id string) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Backend.Kill(ctx, id)
}

// TestExecDuringKillIsRefused: an exec that arrives while a kill is removing
// the sandbox is refused with SandboxGone and never reaches the backend.
func TestExecDuringKillIsRefused(t *testing.T) {
	b := newSlowKill()
	env := sbxtest.Start(t, sbxtest.Options{Backend: b})
	var once sync.Once
	release := func() { once.Do(func() { close(b.release) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	killed := make(chan error, 1)
	go func() {
		_, err := env.Client.Kill(ctx, sb.SandboxID)
		killed <- err
	}()
	select {
	case <-b.entered:
	case <-ctx.Done():
		t.Fatal("the kill never reached the backend")
	}
	execsBefore := len(b.CallsTo("Exec"))
	_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "late"}})
	if !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec during a kill: %v, want SandboxGone", err)
	}
	if n := len(b.CallsTo("Exec")); n != execsBefore {
		t.Fatalf("the exec reached the backend while it removed the sandbox (%d calls, %d before)", n, execsBefore)
	}
	release()
	if err := <-killed; err != nil {
		t.Fatalf("kill: %v", err)
	}
}
