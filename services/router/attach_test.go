package router_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// Item 9: attaching to a process that never ran in a live sandbox answers
// SBX_E1301 at once instead of following nothing forever; attaching to a
// process that ran (its output stored) or runs (nothing stored yet) works.
func TestAttachUnknownProcess(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(ctx(t))
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := env.Client.Attach(c, sb.SandboxID, "never-ran")
	if !errors.Is(err, events.ErrProcessNotFound) {
		t.Fatalf("attach to an unknown process: %v, want ProcessNotFound", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("attach to an unknown process answered after %s", took)
	}
	// A process that runs and has printed nothing yet is attachable.
	if _, err := env.Client.Stream(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "quiet", Cmd: []string{"sleep", "3000"}}); err != nil {
		t.Fatal(err)
	}
	p, err := env.Client.Attach(ctx(t), sb.SandboxID, "quiet")
	if err != nil {
		t.Fatalf("attach to a running, silent process: %v", err)
	}
	p.Close()
	// A process that ran to its end is replayed.
	if _, err := env.Client.Exec(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "done", Cmd: []string{"echo", "hi"}, Stream: false}); err != nil {
		t.Fatal(err)
	}
	r, err := env.Client.Stream(ctx(t), events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "streamed", Cmd: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	p, err = env.Client.Attach(ctx(t), sb.SandboxID, "streamed")
	if err != nil {
		t.Fatalf("attach to an ended process with stored output: %v", err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatalf("replay of an ended process: %v", err)
	}
}
