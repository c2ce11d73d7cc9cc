package server

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// exe writes an executable (or, with mode 0o644, a plain file) at p.
func exe(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestPathCacheSeesChanges: a command found once is looked up from the
// cache, and every change that alters what the search would find is seen
// by the next lookup (a cache without the watches fails all but the first
// case).
func TestPathCacheSeesChanges(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, a, b, c string) // a, b, c: PATH's directories in order
		want   func(a, b, c string) string        // "" for not found
	}{
		{"unchanged", func(*testing.T, string, string, string) {},
			func(a, b, c string) string { return filepath.Join(b, "cmd") }},
		{"shadowed by an earlier directory", func(t *testing.T, a, _, _ string) { exe(t, filepath.Join(a, "cmd"), 0o755) },
			func(a, b, c string) string { return filepath.Join(a, "cmd") }},
		{"made not executable", func(t *testing.T, _, b, _ string) { _ = os.Chmod(filepath.Join(b, "cmd"), 0o644) },
			func(a, b, c string) string { return filepath.Join(c, "cmd") }},
		{"removed", func(t *testing.T, _, b, c string) {
			_ = os.Remove(filepath.Join(b, "cmd"))
			_ = os.Remove(filepath.Join(c, "cmd"))
		}, func(a, b, c string) string { return "" }},
		{"renamed over", func(t *testing.T, a, b, _ string) {
			exe(t, filepath.Join(filepath.Dir(a), "staged"), 0o755)
			if err := os.Rename(filepath.Join(filepath.Dir(a), "staged"), filepath.Join(a, "cmd")); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) string { return filepath.Join(a, "cmd") }},
		{"a missing directory created with the command", func(t *testing.T, a, _, _ string) {
			exe(t, filepath.Join(a+"-later", "deep", "cmd"), 0o755)
		}, nil}, // PATH is set below to hold a-later/deep first
		{"the directory moved away", func(t *testing.T, _, b, _ string) {
			if err := os.Rename(b, b+"-gone"); err != nil {
				t.Fatal(err)
			}
		}, func(a, b, c string) string { return filepath.Join(c, "cmd") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			a, b, c := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")
			for _, d := range []string{a, b, c} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			exe(t, filepath.Join(b, "cmd"), 0o755)
			exe(t, filepath.Join(c, "cmd"), 0o755)
			path := strings.Join([]string{a, b, c}, ":")
			want := tc.want
			if want == nil {
				path = strings.Join([]string{filepath.Join(a+"-later", "deep"), a, b, c}, ":")
				want = func(a, b, c string) string { return filepath.Join(a+"-later", "deep", "cmd") }
			}
			env := []string{"PATH=" + path}
			if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(b, "cmd") {
				t.Fatalf("first lookup: %q, %v", p, err)
			}
			if _, ok := inotify.pathGet(pathKey{path: path, name: "cmd"}); !ok && inotify.fd >= 0 {
				t.Fatal("the first lookup was not cached")
			}
			tc.change(t, a, b, c)
			p, err := lookPath("cmd", env, root)
			if w := want(a, b, c); p != w || (w == "") != (err != nil) {
				t.Fatalf("after the change: %q, %v; want %q", p, err, w)
			}
		})
	}
}

// TestPathCacheAgreesWithSearch: random changes to a small tree (files
// created, removed, made executable or not, renamed; directories created,
// moved away and back; links re-pointed), each followed by a lookup that
// must give what a search without the cache gives.
func TestPathCacheAgreesWithSearch(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "d0"), filepath.Join(root, "d1"), filepath.Join(root, "d2", "sub"), filepath.Join(root, "d3")}
	other := filepath.Join(root, "elsewhere")
	_ = os.MkdirAll(other, 0o755)
	env := []string{"PATH=" + strings.Join(dirs, ":")}
	names := []string{"x", "y"}
	r := rand.New(rand.NewPCG(1, 2))
	for step := range 600 {
		d := dirs[r.IntN(len(dirs))]
		n := names[r.IntN(len(names))]
		switch r.IntN(7) {
		case 0:
			_ = os.MkdirAll(d, 0o755)
			_ = os.WriteFile(filepath.Join(d, n), nil, 0o755)
		case 1:
			_ = os.Remove(filepath.Join(d, n))
		case 2:
			_ = os.Chmod(filepath.Join(d, n), os.FileMode(0o644|r.IntN(2)*0o111))
		case 3:
			_ = os.Rename(d, d+".away")
		case 4:
			_ = os.Rename(d+".away", d)
		case 5:
			_ = os.WriteFile(filepath.Join(other, n), nil, os.FileMode(0o644|r.IntN(2)*0o111))
		case 6:
			_ = os.MkdirAll(d, 0o755)
			l := filepath.Join(d, n)
			_ = os.Remove(l)
			_ = os.Symlink(filepath.Join(other, n), l)
		}
		for _, n := range names {
			got, gerr := lookPath(n, env, root)
			want, werr := searchPath(n, dirs)
			if got != want || (gerr == nil) != (werr == nil) {
				t.Fatalf("step %d, %s: cached %q (%v), search %q (%v)", step, n, got, gerr, want, werr)
			}
		}
	}
}

// TestPathLookupWithoutInotify: with no inotify instance to be had (the
// uid's instances used up), every lookup searches, and finds what is there
// now.
func TestPathLookupWithoutInotify(t *testing.T) {
	saved := inotify
	inotify = &hub{opened: true, fd: -1}
	t.Cleanup(func() { inotify = saved })
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	exe(t, filepath.Join(b, "cmd"), 0o755)
	_ = os.MkdirAll(a, 0o755)
	env := []string{"PATH=" + a + ":" + b}
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(b, "cmd") {
		t.Fatalf("lookup: %q, %v", p, err)
	}
	exe(t, filepath.Join(a, "cmd"), 0o755)
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(a, "cmd") {
		t.Fatalf("lookup after a shadowing command: %q, %v", p, err)
	}
	if len(inotify.cache.hits) != 0 {
		t.Fatalf("cached %d answers without inotify", len(inotify.cache.hits))
	}
}

// inotifyInstances counts this process's inotify instances.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestOneInstanceForBoth: the socket's directory watch (WatchDir) and the
// PATH cache share one inotify instance, since the kernel counts them per
// uid and every sandbox's agent runs as the same one. An event in the
// watched directory reaches WatchDir's callback through the reader, and
// the cache still sees every change to what it searched.
func TestOneInstanceForBoth(t *testing.T) {
	saved := inotify
	inotify = &hub{}
	t.Cleanup(func() { inotify = saved })
	before := inotifyInstances(t)
	root := t.TempDir()
	sock, a, b := filepath.Join(root, "run"), filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{sock, a, b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan struct{}, 1)
	if err := WatchDir(sock, unix.IN_CREATE|unix.IN_ATTRIB|unix.IN_MOVED_TO, func() {
		select {
		case got <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	exe(t, filepath.Join(b, "cmd"), 0o755)
	env := []string{"PATH=" + a + ":" + b}
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(b, "cmd") {
		t.Fatalf("lookup: %q, %v", p, err)
	}
	if n := inotifyInstances(t) - before; n != 1 {
		t.Fatalf("%d inotify instances for the socket watch and the PATH cache, want 1", n)
	}
	if err := os.WriteFile(filepath.Join(sock, "agent.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice of the entry created in the watched directory within 5 s")
	}
	exe(t, filepath.Join(a, "cmd"), 0o755)
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(a, "cmd") {
		t.Fatalf("lookup after a shadowing command: %q, %v", p, err)
	}
}

// TestPathCacheDirCreatedMidLookup: a PATH directory found missing is
// watched through its ancestor. Created after that look and before the
// ancestor's watch, it would have no watch of its own, and a command put in
// it later would go unseen behind a cached answer. The lookup looks again
// once the ancestor is watched, and keeps nothing then.
func TestPathCacheDirCreatedMidLookup(t *testing.T) {
	root := t.TempDir()
	late, b := filepath.Join(root, "late"), filepath.Join(root, "b")
	exe(t, filepath.Join(b, "cmd"), 0o755)
	env := []string{"PATH=" + late + ":" + b}
	afterWatchesFor = func() {
		afterWatchesFor = nil
		if err := os.MkdirAll(late, 0o755); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { afterWatchesFor = nil })
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(b, "cmd") {
		t.Fatalf("first lookup: %q, %v", p, err)
	}
	exe(t, filepath.Join(late, "cmd"), 0o755)
	if p, err := lookPath("cmd", env, root); err != nil || p != filepath.Join(late, "cmd") {
		t.Fatalf("after a command was put in the directory created mid-lookup: %q, %v; want %q", p, err, filepath.Join(late, "cmd"))
	}
}
