package dockerworker

import (
	"errors"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func TestImagePolicy(t *testing.T) {
	const dig = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	p, err := newImagePolicy(append(BuiltImages, "example.com/team/*", "python", "busybox@"+dig))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, want string
		err       error
	}{
		{"sandboxio/python:3.11", "sandboxio/python:3.11", nil},
		{"docker.io/sandboxio/python:3.11", "sandboxio/python:3.11", nil},
		{"sandboxio/base", "sandboxio/base:latest", nil},
		{"sandboxio/python:3.12", "", events.ErrImageNotAllowed},
		{"alpine", "", events.ErrImageNotAllowed},
		{"alpine@" + dig, "", events.ErrImageNotAllowed},
		{"python:3.12", "python:3.12", nil},
		{"python@" + dig, "python@" + dig, nil},
		{"busybox@" + dig, "busybox@" + dig, nil},
		{"busybox:latest", "", events.ErrImageNotAllowed},
		{"example.com/team/tool:v1", "example.com/team/tool:v1", nil},
		{"example.com/teamx/tool:v1", "", events.ErrImageNotAllowed},
		{"example.com/other/tool:v1", "", events.ErrImageNotAllowed},
		{"Alpine", "", events.ErrInvalidImageRef},
		{"alpine@sha256:1234", "", events.ErrInvalidImageRef},
		{"alpine@md5:0123456789abcdef0123456789abcdef", "", events.ErrInvalidImageRef},
		{"", "", events.ErrInvalidImageRef},
		{" sandboxio/base", "", events.ErrInvalidImageRef},
		{"sandboxio/base:la test", "", events.ErrInvalidImageRef},
		{"-rm", "", events.ErrInvalidImageRef},
	} {
		got, err := p.check(tc.ref)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("check(%q) = %q, %v; want %q, %v", tc.ref, got, err, tc.want, tc.err)
		}
	}
	for _, bad := range []string{"bad ref!", "x/*/y/*", "alpine:*"} {
		if _, err := newImagePolicy([]string{bad}); err == nil {
			t.Errorf("allowlist entry %q accepted", bad)
		}
	}
}

func FuzzImagePolicy(f *testing.F) {
	p, err := newImagePolicy(append(BuiltImages, "example.com/team/*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"sandboxio/python:3.11", "alpine@sha256:00", "example.com/team/x", "a/../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		got, err := p.check(ref)
		if err != nil {
			return
		}
		// What passes is itself valid and allowed: checking it again gives it back.
		if again, err := p.check(got); err != nil || again != got {
			t.Fatalf("check(%q) = %q, but check(%q) = %q, %v", ref, got, got, again, err)
		}
	})
}
