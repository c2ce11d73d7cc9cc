package server

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// stableDir reports whether dir is the process's working directory and
// cannot be replaced by another directory of the same name: the root, or
// a mount point (rmdir and rename of a mount point fail with EBUSY, and
// the sandbox's user cannot unmount it). A process started in such a
// directory may simply inherit the agent's, which spares each exec a stat
// and the child's chdir: two path walks that on fuse-overlayfs cost a
// FUSE round trip each (the root's ACL is fetched for every walk by a
// user other than its owner). Any other directory is checked and entered
// by path every time, as it may have been removed or replaced since.
func stableDir(dir string) bool {
	if dir == "" || !filepath.IsAbs(dir) {
		return false
	}
	var d, cwd unix.Stat_t
	if unix.Stat(dir, &d) != nil || unix.Stat(".", &cwd) != nil || d.Dev != cwd.Dev || d.Ino != cwd.Ino {
		return false
	}
	if filepath.Clean(dir) == "/" {
		return true
	}
	var parent unix.Stat_t
	return unix.Stat(filepath.Dir(filepath.Clean(dir)), &parent) == nil && parent.Dev != d.Dev
}
