package server

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Trees the files ops refuse: kernel views, not the sandbox's filesystem.
var forbiddenRoots = []string{"/proc", "/sys", "/dev"}

// Filesystems the files ops refuse wherever they are mounted.
var forbiddenFS = map[int64]bool{
	unix.PROC_SUPER_MAGIC: true, unix.SYSFS_MAGIC: true, unix.CGROUP_SUPER_MAGIC: true,
	unix.CGROUP2_SUPER_MAGIC: true, unix.DEVPTS_SUPER_MAGIC: true, unix.DEBUGFS_MAGIC: true,
	unix.SECURITYFS_MAGIC: true, unix.BPF_FS_MAGIC: true, unix.TRACEFS_MAGIC: true,
}

const maxLinks = 40

func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

func opErr(kind, format string, a ...any) *proto.Error {
	return &proto.Error{Kind: kind, Message: fmt.Sprintf(format, a...)}
}

// errnoErr classifies a system call's error.
func errnoErr(what string, err error) *proto.Error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return opErr(proto.ErrIO, "%s: %v", what, err)
	}
	kind := proto.ErrIO
	switch errno {
	case unix.ENOENT:
		kind = proto.ErrNotFound
	case unix.EEXIST, unix.ENOTEMPTY:
		kind = proto.ErrExists
	case unix.EACCES, unix.EPERM, unix.EROFS:
		kind = proto.ErrPermission
	case unix.ELOOP:
		kind = proto.ErrSymlink
	case unix.ENOTDIR:
		kind = proto.ErrNotDir
	case unix.EISDIR:
		kind = proto.ErrIsDir
	case unix.ENXIO, unix.ENODEV:
		kind = proto.ErrNotRegular
	}
	return opErr(kind, "%s: %s", what, errno.Error())
}

// checkAsked refuses a path that names a forbidden tree.
func checkAsked(p string) *proto.Error {
	for _, r := range forbiddenRoots {
		if under(p, r) {
			return opErr(proto.ErrForbidden, "%s is outside the sandbox's filesystem", p)
		}
	}
	return nil
}

// checkFD refuses an open file that is in a forbidden tree or on a kernel
// filesystem: where the fd really is, whatever path led there.
func checkFD(fd int) *proto.Error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err == nil && forbiddenFS[int64(st.Type)] {
		return opErr(proto.ErrForbidden, "the path leads to a kernel filesystem")
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil // no /proc: the statfs check stands alone
	}
	if e := checkAsked(real); e != nil {
		return opErr(proto.ErrForbidden, "the path leads to %s, outside the sandbox's filesystem", real)
	}
	return nil
}

// resolver opens paths inside root "/" with RESOLVE_IN_ROOT semantics:
// symlinks are followed as if the root were the filesystem root, magic links
// (/proc/*/fd, /proc/*/root) are not followed at all.
type resolver struct {
	root    int
	noOpen2 bool
}

func newResolver() (*resolver, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &resolver{root: fd}, nil
}

// open opens p (absolute, clean) with flags; the last component is followed
// only when follow is set.
func (r *resolver) open(p string, flags int, mode uint32, follow bool) (int, error) {
	fd, err := r.open1(p, flags, mode, follow)
	if err == unix.ELOOP && follow {
		// Not a symlink at the end that we chose not to follow: a loop, or
		// a magic link (/proc/self/root...) that is never followed.
		return -1, opErr(proto.ErrInvalid, "%s: too many levels of symbolic links, or a /proc magic link", p)
	}
	return fd, err
}

func (r *resolver) open1(p string, flags int, mode uint32, follow bool) (int, error) {
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	flags |= unix.O_CLOEXEC
	if !r.noOpen2 {
		how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		for try := 0; try < 8; try++ {
			fd, err := unix.Openat2(r.root, p, how)
			switch err {
			case unix.EAGAIN:
				// The kernel could not rule out a ".." race (mounts and
				// renames elsewhere on the host): retry, then walk.
				continue
			case unix.ENOSYS, unix.EPERM:
				r.noOpen2 = true // an old kernel, gVisor, or a seccomp profile without openat2
			default:
				return fd, err
			}
			break
		}
	}
	return r.walk(p, flags, mode)
}

// walk is open without openat2: one component at a time, each opened with
// O_PATH|O_NOFOLLOW relative to the previous one, symlinks read and resolved
// from the root for absolute targets. ".." never goes above the root. A
// component swapped for a symlink between the check and the open fails with
// ELOOP rather than being followed.
func (r *resolver) walk(p string, flags int, mode uint32) (int, error) {
	follow := flags&unix.O_NOFOLLOW == 0
	flags |= unix.O_NOFOLLOW
	var stack []int
	defer func() {
		for _, fd := range stack {
			_ = unix.Close(fd)
		}
	}()
	cur := func() int {
		if len(stack) == 0 {
			return r.root
		}
		return stack[len(stack)-1]
	}
	rest := splitPath(p)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case ".":
			continue
		case "..":
			if n := len(stack); n > 0 {
				_ = unix.Close(stack[n-1])
				stack = stack[:n-1]
			}
			continue
		}
		last := len(rest) == 0
		fd, err := unix.Openat(cur(), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return -1, err
		}
		isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
		if isLink && (!last || follow) {
			target, err := readlinkFD(fd)
			_ = unix.Close(fd)
			if err != nil {
				return -1, err
			}
			if links++; links > maxLinks {
				return -1, unix.ELOOP
			}
			if strings.HasPrefix(target, "/") {
				for _, f := range stack {
					_ = unix.Close(f)
				}
				stack = stack[:0]
			}
			rest = append(splitPath(target), rest...)
			if len(rest) == 0 {
				break
			}
			continue
		}
		if last {
			_ = unix.Close(fd)
			return unix.Openat(cur(), c, flags, mode)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			_ = unix.Close(fd)
			return -1, unix.ENOTDIR
		}
		stack = append(stack, fd)
	}
	// p named the root, or its last link pointed at a directory.
	return unix.Openat(cur(), ".", flags&^unix.O_NOFOLLOW, mode)
}

func readlinkFD(fd int) (string, error) {
	buf := make([]byte, proto.MaxPath)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// openDir opens the directory that holds p's last component, checked, and
// returns it with that component's name. With parents, missing directories
// are made (mode 0755, owned by whoever runs the agent).
func (r *resolver) openDir(p string, parents bool) (int, string, *proto.Error) {
	if e := checkAsked(p); e != nil {
		return -1, "", e
	}
	if p == "/" {
		return -1, "", opErr(proto.ErrInvalid, "the root has no parent")
	}
	dir, base := path.Split(p)
	dir = path.Clean(dir)
	fd, err := r.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0, true)
	if err == unix.ENOENT && parents {
		fd, err = r.mkdirAll(dir)
	}
	if err != nil {
		return -1, "", errnoErr("open "+dir, err)
	}
	if e := checkFD(fd); e != nil {
		_ = unix.Close(fd)
		return -1, "", e
	}
	return fd, base, nil
}

// mkdirAll makes dir and its missing parents, each inside the root.
func (r *resolver) mkdirAll(dir string) (int, error) {
	parent, base := path.Split(dir)
	parent = path.Clean(parent)
	pfd, err := r.open(parent, unix.O_PATH|unix.O_DIRECTORY, 0, true)
	if err == unix.ENOENT && parent != "/" {
		pfd, err = r.mkdirAll(parent)
	}
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if e := checkFD(pfd); e != nil {
		return -1, e
	}
	if err := unix.Mkdirat(pfd, base, 0o755); err != nil && err != unix.EEXIST {
		return -1, err
	}
	return unix.Openat(pfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
