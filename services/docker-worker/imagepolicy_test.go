package dockerworker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
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

// TestCanonicalImage: every spelling of one image is one string, the form
// pools, the allowlist and creates compare.
func TestCanonicalImage(t *testing.T) {
	cases := []struct{ in, want string }{
		{"sandboxio/base", "sandboxio/base:latest"},
		{"sandboxio/base:latest", "sandboxio/base:latest"},
		{"docker.io/sandboxio/base", "sandboxio/base:latest"},
		{"docker.io/sandboxio/base:latest", "sandboxio/base:latest"},
		{"alpine", "alpine:latest"},
		{"docker.io/library/alpine:3.20", "alpine:3.20"},
		{"ghcr.io/x/y", "ghcr.io/x/y:latest"},
		{"localhost:5000/img", "localhost:5000/img:latest"},
		{"alpine@sha256:" + strings.Repeat("a", 64), "alpine@sha256:" + strings.Repeat("a", 64)},
		{"sandboxio/Base", ""}, // upper case in a path: invalid
		{"", ""},
		{" sandboxio/base", ""},
	}
	for _, c := range cases {
		got, err := CanonicalImage(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("CanonicalImage(%q) = %q, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("CanonicalImage(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	// A pool named without a tag allows that image, not every tag of it.
	p, err := imageAllowlist(Config{DefaultImage: "sandboxio/base", Pools: []PoolConfig{{Image: "docker.io/sandboxio/python"}}})
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]bool{"sandboxio/base": true, "sandboxio/python:latest": true, "sandboxio/python:3.9": false} {
		if _, err := p.check(ref); (err == nil) != want {
			t.Errorf("check(%q): %v, want allowed %v", ref, err, want)
		}
	}
}

// TestPoolMissLogged: a create of a pool's image in another shape is said
// once per pool; a create of the pool's own shape (empty for now) is not.
func TestPoolMissLogged(t *testing.T) {
	var buf bytes.Buffer
	b := &Backend{log: slog.New(slog.NewTextHandler(&buf, nil))}
	p := &pool{b: b, idle: map[string][]*member{}, missed: map[string]bool{},
		specs: []poolSpec{{cfg: PoolConfig{Class: "base"}, shape: shape{image: "sandboxio/base:latest", runtime: "runc"}}}}
	p.take(shape{image: "sandboxio/base:latest", runtime: "runc"}.key())
	if buf.Len() != 0 {
		t.Fatalf("the pool's own shape logged: %s", buf.String())
	}
	other := shape{image: "sandboxio/base:latest", runtime: "runsc"}.key()
	p.take(other)
	p.take(other)
	if n := strings.Count(buf.String(), "does not fit the pool"); n != 1 {
		t.Fatalf("%d warnings, want 1: %s", n, buf.String())
	}
}
