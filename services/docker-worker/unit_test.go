package dockerworker

import (
	"syscall"
	"testing"
)

// Hermetic tests of the pure helpers; everything touching Docker is behind
// the integration build tag.

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		ok   bool
	}{
		{"TERM", syscall.SIGTERM, true}, {"SIGINT", syscall.SIGINT, true}, {"hup", syscall.SIGHUP, true},
		{"9", syscall.SIGKILL, true}, {"NOPE", 0, false}, {"0", 0, false}, {"99", 0, false},
	} {
		got, ok := parseSignal(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSignal(%q) = %v, %v", tc.in, got, ok)
		}
	}
}

func TestPythonError(t *testing.T) {
	for _, tc := range []struct{ stderr, name, value string }{
		{"Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nZeroDivisionError: division by zero\n", "ZeroDivisionError", "division by zero"},
		{"noise\nTraceback (most recent call last):\n  File \"x\"\nmod.CustomError: bad: worse\n", "mod.CustomError", "bad: worse"},
		{"Traceback (most recent call last):\n  File \"x\"\nKeyboardInterrupt\n", "KeyboardInterrupt", ""},
	} {
		e := pythonError([]byte(tc.stderr))
		if e == nil || e.Name != tc.name || e.Value != tc.value {
			t.Errorf("pythonError(%q) = %+v", tc.stderr, e)
		}
	}
	if e := pythonError([]byte("just output")); e != nil {
		t.Errorf("no traceback: %+v", e)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"/sbx-abc"}, "abc"}, {[]string{"/sbx-pool-0123"}, ""}, {[]string{"/other"}, ""}, {[]string{"/sbx-a.b"}, ""},
	} {
		if got := sandboxIDFromNames(tc.names); got != tc.want {
			t.Errorf("sandboxIDFromNames(%v) = %q", tc.names, got)
		}
	}
	for _, tc := range []struct {
		user     string
		uid, gid int
		ok       bool
	}{{"1000:1000", 1000, 1000, true}, {"1000", 1000, 1000, true}, {"", 0, 0, true}, {"sandbox", 0, 0, false}, {"1:x", 0, 0, false}} {
		uid, gid, ok := numericOwner(tc.user)
		if uid != tc.uid || gid != tc.gid || ok != tc.ok {
			t.Errorf("numericOwner(%q) = %d %d %v", tc.user, uid, gid, ok)
		}
	}
}
