package server

import (
	"errors"
	"testing"
)

// TestStableDirOnThisHost: the root as the working directory is stable; a
// directory that is not the working directory, or not a mount point, or
// not spelled cleanly and absolutely, is not.
func TestStableDirOnThisHost(t *testing.T) {
	tmp := t.TempDir()
	for _, c := range []struct {
		name, cwd, dir string
		want           bool
	}{
		{"root, the working directory", "/", "/", true},
		{"a directory that is not the working directory", "/", tmp, false},
		{"the working directory, not a mount point", tmp, tmp, false},
		{"a relative path", tmp, ".", false},
		{"not clean", tmp, tmp + "/", false},
		{"empty", tmp, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(c.cwd)
			if got := stableDir(c.dir); got != c.want {
				t.Fatalf("stableDir(%q) in %q = %v, want %v", c.dir, c.cwd, got, c.want)
			}
		})
	}
}

// fakeDirs: path -> (dev, owner); "." is the working directory; links maps
// a path to its resolved one; writable lists what the process may write.
type fakeDirs struct {
	dev      map[string]uint64
	owner    map[string]uint32
	cwd      string
	links    map[string]string
	canWrite map[string]bool
	uid      uint32
}

func (f fakeDirs) stat(p string) (uint64, uint64, uint32, error) {
	if p == "." {
		p = f.cwd
	}
	if r, ok := f.links[p]; ok {
		p = r
	}
	d, ok := f.dev[p]
	if !ok {
		return 0, 0, 0, errors.New("no such file")
	}
	return d, uint64(len(p)), f.owner[p], nil // the inode: distinct enough here
}

func (f fakeDirs) realPath(p string) (string, error) {
	if r, ok := f.links[p]; ok {
		return r, nil
	}
	return p, nil
}
func (f fakeDirs) writable(p string) bool { return f.canWrite[p] }
func (f fakeDirs) euid() uint32           { return f.uid }

// TestStableDirRules: what the sandbox's user could replace is not stable.
func TestStableDirRules(t *testing.T) {
	const user = 1000
	base := func() fakeDirs {
		return fakeDirs{
			dev:   map[string]uint64{"/": 1, "/work": 2, "/home": 1, "/home/u": 1, "/home/u/mnt": 3},
			owner: map[string]uint32{"/work": user, "/home/u": 0, "/home/u/mnt": user},
			uid:   user, links: map[string]string{}, canWrite: map[string]bool{},
		}
	}
	for _, c := range []struct {
		name string
		dir  string
		mod  func(*fakeDirs)
		want bool
	}{
		{"a mount point under the root", "/work", nil, true},
		{"a nested mount point, its ancestors not the user's", "/home/u/mnt", nil, true},
		{"the working directory is elsewhere", "/work", func(f *fakeDirs) { f.cwd = "/" }, false},
		{"not a mount point", "/home/u", nil, false},
		{"a link to a mount point", "/home/u/w", func(f *fakeDirs) { f.links["/home/u/w"], f.cwd = "/work", "/work" }, false},
		{"an ancestor the user may write", "/home/u/mnt", func(f *fakeDirs) { f.canWrite["/home/u"] = true }, false},
		{"an ancestor the user owns (may chmod)", "/home/u/mnt", func(f *fakeDirs) { f.owner["/home/u"] = user }, false},
		{"a root the user may write", "/work", func(f *fakeDirs) { f.canWrite["/"] = true }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := base()
			f.cwd = c.dir // the working directory, unless mod says otherwise
			if c.mod != nil {
				c.mod(&f)
			}
			if got := stableDirIn(c.dir, f); got != c.want {
				t.Fatalf("stableDirIn(%q) = %v, want %v", c.dir, got, c.want)
			}
		})
	}
}
