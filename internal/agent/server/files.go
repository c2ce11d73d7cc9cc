package server

import (
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Files does file operations with the rights of the process it runs in, never
// leaving the path asked for through a symlink on the last component of a
// write, mkdir or remove, and refusing /proc, /sys, /dev and kernel
// filesystems wherever a path leads. Its methods are what both the served
// protocol and the one-shot `sbx-agent files` commands call.
type Files struct{ r *resolver }

// NewFiles opens the root.
func NewFiles() (*Files, error) {
	r, err := newResolver()
	if err != nil {
		return nil, err
	}
	return &Files{r: r}, nil
}

// openRegular opens p for reading, following symlinks inside the root, and
// checks that it is a regular file in an allowed place.
func (f *Files) openRegular(p string) (*os.File, int64, *proto.Error) {
	if e := checkAsked(p); e != nil {
		return nil, 0, e
	}
	fd, err := f.r.open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0, true)
	if err != nil {
		return nil, 0, errnoErr("open "+p, err)
	}
	if e := checkFD(fd); e != nil {
		_ = unix.Close(fd)
		return nil, 0, e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, 0, errnoErr("stat "+p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil, 0, opErr(proto.ErrIsDir, "%s is a directory", p)
		}
		return nil, 0, opErr(proto.ErrNotRegular, "%s is not a regular file", p)
	}
	return os.NewFile(uintptr(fd), p), st.Size, nil
}

// Read copies the regular file p to w. A file larger than max (when max > 0)
// is refused before anything is sent; its allocated size counts too, so a
// sparse file is judged by its apparent size.
func (f *Files) Read(p string, max int64, w io.Writer) (int64, *proto.Error) {
	file, size, e := f.openRegular(p)
	if e != nil {
		return 0, e
	}
	defer file.Close()
	if max > 0 && size > max {
		return 0, opErr(proto.ErrTooLarge, "%s is %d bytes, over the limit of %d", p, size, max)
	}
	r := io.Reader(file)
	if max > 0 {
		r = io.LimitReader(file, max)
	}
	n, err := io.Copy(w, r)
	if err != nil {
		return n, errnoErr("read "+p, err)
	}
	return n, nil
}

// Write makes or truncates the regular file p and copies size bytes of r
// into it (size < 0: until EOF). A symlink, a FIFO or a device at p is
// refused, never followed or opened; missing parents are made when parents is
// set.
func (f *Files) Write(p string, mode uint32, parents bool, r io.Reader, size int64) (int64, *proto.Error) {
	dfd, base, e := f.r.openDir(p, parents)
	if e != nil {
		return 0, e
	}
	defer unix.Close(dfd)
	if mode == 0 {
		mode = 0o644
	}
	fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return 0, errnoErr("open "+p, err)
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, errnoErr("stat "+p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, opErr(proto.ErrNotRegular, "%s is not a regular file", p)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return 0, errnoErr("truncate "+p, err)
	}
	src := r
	if size >= 0 {
		src = io.LimitReader(r, size)
	}
	n, err := io.Copy(file, src)
	if err != nil {
		return n, errnoErr("write "+p, err)
	}
	if size >= 0 && n != size {
		return n, opErr(proto.ErrIO, "content ended after %d of %d bytes", n, size)
	}
	return n, nil
}

// Stat describes p; a symlink at p is described, not followed.
func (f *Files) Stat(p string) (proto.FileInfo, *proto.Error) {
	if p == "/" {
		var st unix.Stat_t
		if err := unix.Fstat(f.r.root, &st); err != nil {
			return proto.FileInfo{}, errnoErr("stat /", err)
		}
		return infoOf("/", &st, ""), nil
	}
	dfd, base, e := f.r.openDir(p, false)
	if e != nil {
		return proto.FileInfo{}, e
	}
	defer unix.Close(dfd)
	return statAt(dfd, base)
}

func statAt(dfd int, name string) (proto.FileInfo, *proto.Error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return proto.FileInfo{}, errnoErr("stat "+name, err)
	}
	link := ""
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, proto.MaxPath)
		if n, err := unix.Readlinkat(dfd, name, buf); err == nil {
			link = string(buf[:n])
		}
	}
	return infoOf(name, &st, link), nil
}

func infoOf(name string, st *unix.Stat_t, link string) proto.FileInfo {
	return proto.FileInfo{Name: name, Size: st.Size, Mode: uint32(fileMode(st.Mode)),
		ModTime: st.Mtim.Nano(), Link: link, UID: int(st.Uid), GID: int(st.Gid)}
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// List lists the directory p (following symlinks inside the root) one level
// deep, at most proto.MaxEntries entries (truncated says there were more). A
// path that is not a directory is described alone, as self. An empty
// directory is an empty listing.
func (f *Files) List(p string) (entries []proto.FileInfo, self *proto.FileInfo, truncated bool, e *proto.Error) {
	if e := checkAsked(p); e != nil {
		return nil, nil, false, e
	}
	fd, err := f.r.open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0, true)
	if err != nil {
		return nil, nil, false, errnoErr("open "+p, err)
	}
	if e := checkFD(fd); e != nil {
		_ = unix.Close(fd)
		return nil, nil, false, e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, nil, false, errnoErr("stat "+p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		_ = unix.Close(fd)
		fi := infoOf(path.Base(p), &st, "")
		return nil, &fi, false, nil
	}
	entries, truncated, e = listDir(os.NewFile(uintptr(fd), p), fd, p)
	return entries, nil, truncated, e
}

// listDir lists the open directory dir (descriptor fd) and closes it.
func listDir(dir *os.File, fd int, p string) ([]proto.FileInfo, bool, *proto.Error) {
	defer dir.Close()
	names, err := dir.Readdirnames(proto.MaxEntries + 1)
	if err != nil && err != io.EOF {
		return nil, false, errnoErr("list "+p, err)
	}
	truncated := len(names) > proto.MaxEntries
	if truncated {
		names = names[:proto.MaxEntries]
	}
	out := make([]proto.FileInfo, 0, len(names))
	for _, n := range names {
		fi, e := statAt(fd, n)
		if e != nil {
			continue // gone meanwhile
		}
		out = append(out, fi)
	}
	return out, truncated, nil
}

// Mkdir makes the directory p (and its parents with parents).
func (f *Files) Mkdir(p string, mode uint32, parents bool) *proto.Error {
	dfd, base, e := f.r.openDir(p, parents)
	if e != nil {
		return e
	}
	defer unix.Close(dfd)
	if mode == 0 {
		mode = 0o755
	}
	if err := unix.Mkdirat(dfd, base, mode&0o777); err != nil {
		if err == unix.EEXIST && parents {
			if fi, e := statAt(dfd, base); e == nil && fs.FileMode(fi.Mode).IsDir() {
				return nil
			}
		}
		return errnoErr("mkdir "+p, err)
	}
	return nil
}

// Remove removes the file, symlink or empty directory p (a symlink itself,
// never what it points to).
func (f *Files) Remove(p string) *proto.Error {
	dfd, base, e := f.r.openDir(p, false)
	if e != nil {
		return e
	}
	defer unix.Close(dfd)
	err := unix.Unlinkat(dfd, base, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		if err2 := unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR); err2 == nil || err2 != unix.ENOTDIR {
			err = err2
		}
	}
	if err != nil {
		return errnoErr("remove "+p, err)
	}
	return nil
}
