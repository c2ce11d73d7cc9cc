package router

import (
	"testing"
	"time"
)

// TestRelayCloseTakesAllOnce: close refuses every later add and returns
// each pending command exactly once, never one a take already returned
// (a create answered by its worker is not abandoned at shutdown).
func TestRelayCloseTakesAllOnce(t *testing.T) {
	r := newReplyRelay("_SBX.router.test.")
	never := func() { t.Error("a timer fired") }
	a, b := &pending{op: "create"}, &pending{op: "exec"}
	if !r.add("a", a, time.Hour, never) || !r.add("b", b, time.Hour, never) {
		t.Fatal("add refused before close")
	}
	if got := r.take("a"); got != a {
		t.Fatalf("take a: %v", got)
	}
	left := r.close()
	if len(left) != 1 || left[0] != b {
		t.Fatalf("close returned %v, want only b", left)
	}
	if r.take("b") != nil || r.len() != 0 {
		t.Error("a command close took is still in the table")
	}
	c := &pending{}
	if r.add("c", c, time.Millisecond, never) {
		t.Error("add accepted after close")
	}
	if c.timer != nil || r.len() != 0 || len(r.close()) != 0 {
		t.Error("a refused command is in the table or has a timer")
	}
}
