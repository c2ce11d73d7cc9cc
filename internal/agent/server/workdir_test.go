package server

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// isMountPoint: dir's device differs from its parent's.
func isMountPoint(dir string) bool {
	var d, p unix.Stat_t
	return unix.Stat(dir, &d) == nil && unix.Stat(filepath.Dir(dir), &p) == nil && d.Dev != p.Dev
}

func TestStableDir(t *testing.T) {
	tmp := t.TempDir()
	mount := ""
	for _, d := range []string{"/dev", "/proc", "/sys", "/dev/shm", "/tmp"} {
		if isMountPoint(d) {
			mount = d
			break
		}
	}
	cases := []struct {
		name, cwd, dir string
		want           bool
	}{
		{"root, the working directory", "/", "/", true},
		{"a directory that is not the working directory", "/", tmp, false},
		{"the working directory, not a mount point", tmp, tmp, false},
		{"a relative path", tmp, ".", false},
		{"empty", tmp, "", false},
	}
	if mount != "" {
		cases = append(cases,
			struct {
				name, cwd, dir string
				want           bool
			}{"a mount point, the working directory", mount, mount, true},
			struct {
				name, cwd, dir string
				want           bool
			}{"a mount point, not the working directory", "/", mount, false})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(c.cwd)
			if got := stableDir(c.dir); got != c.want {
				t.Fatalf("stableDir(%q) in %q = %v, want %v", c.dir, c.cwd, got, c.want)
			}
		})
	}
}
