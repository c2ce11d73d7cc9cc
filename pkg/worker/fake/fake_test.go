package fake

import (
	"strings"
	"testing"
	"unsafe"
)

// TestRecordKeepsCopiesWithinABound: `sandboxio dev` runs the fake for as
// long as it runs and records every call. A remembered call kept the
// strings it was given, substrings of a command's message, and the calls
// were never forgotten: dev's heap grew with every exec.
func TestRecordKeepsCopiesWithinABound(t *testing.T) {
	b := New(Config{})
	msg := "header block " + strings.Repeat("h", 1000) + " sandbox-1 process-1 true"
	sb, pid, arg := msg[1014:1023], msg[1024:1033], msg[1034:]
	b.record(Call{Method: "Exec", SandboxID: sb, ProcessID: pid, Cmd: []string{arg}})
	c := b.Calls()[0]
	if c.SandboxID != "sandbox-1" || c.ProcessID != "process-1" || c.Cmd[0] != "true" {
		t.Fatalf("recorded %+v", c)
	}
	for _, s := range [][2]string{{c.SandboxID, sb}, {c.ProcessID, pid}, {c.Cmd[0], arg}} {
		if unsafe.StringData(s[0]) == unsafe.StringData(s[1]) {
			t.Fatalf("the call keeps the caller's string %q (and the message it is part of)", s[1])
		}
	}
	for range MaxCalls + 10 {
		b.record(Call{Method: "Exec"})
	}
	if n := len(b.Calls()); n > MaxCalls || n < MaxCalls/2 {
		t.Fatalf("%d calls remembered after %d, want between %d and %d", n, MaxCalls+11, MaxCalls/2, MaxCalls)
	}
}
