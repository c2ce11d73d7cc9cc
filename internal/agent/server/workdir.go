package server

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// stableDir reports whether dir is the process's working directory and no
// one without privileges can make its path name another directory: a
// process started there may then inherit the agent's working directory,
// which spares each exec a stat and the child's chdir, two path walks that
// on fuse-overlayfs cost a FUSE round trip each (the root's ACL is fetched
// on every walk through it by a user other than its owner; ADR 27).
//
// That holds for the root, and for a mount point (rmdir and rename of one
// fail with EBUSY, and the sandbox's user cannot unmount it) whose path has
// no symbolic link (a link can be pointed elsewhere) and whose ancestors
// this process can neither write nor chmod (a writable ancestor can be
// renamed and replaced). Any other directory is checked and entered by
// path on every exec, as it may have been replaced since.
func stableDir(dir string) bool { return stableDirIn(dir, hostDirs{}) }

// dirFacts is what stableDirIn asks of the filesystem.
type dirFacts interface {
	// stat: device, inode and owner of path, following links.
	stat(path string) (dev, ino uint64, uid uint32, err error)
	realPath(path string) (string, error)
	writable(path string) bool
	euid() uint32
}

func stableDirIn(dir string, fs dirFacts) bool {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return false
	}
	dev, ino, _, err := fs.stat(dir)
	cdev, cino, _, cerr := fs.stat(".")
	if err != nil || cerr != nil || dev != cdev || ino != cino {
		return false
	}
	if dir == "/" {
		return true
	}
	if real, err := fs.realPath(dir); err != nil || real != dir {
		return false
	}
	if pdev, _, _, err := fs.stat(filepath.Dir(dir)); err != nil || pdev == dev {
		return false // not a mount point
	}
	for a := filepath.Dir(dir); ; a = filepath.Dir(a) {
		_, _, uid, err := fs.stat(a)
		if err != nil || uid == fs.euid() || fs.writable(a) {
			return false
		}
		if a == "/" {
			return true
		}
	}
}

// hostDirs are the facts of this process's filesystem.
type hostDirs struct{}

func (hostDirs) stat(path string) (uint64, uint64, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, 0, err
	}
	return st.Dev, st.Ino, st.Uid, nil
}

func (hostDirs) realPath(path string) (string, error) { return filepath.EvalSymlinks(path) }
func (hostDirs) writable(path string) bool            { return unix.Access(path, unix.W_OK) == nil }
func (hostDirs) euid() uint32                         { return uint32(os.Geteuid()) }
