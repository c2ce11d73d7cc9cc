package dockerworker

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Paths the files API refuses, with everything below them: kernel views, not
// the sandbox's filesystem.
var forbiddenRoots = []string{"/proc", "/sys", "/dev"}

const maxSymlinks = 40

func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// resolved is a path resolved inside the container.
type resolved struct {
	path    string // the resolved absolute path, no symlink in it
	exists  bool
	stat    container.PathStat
	parent  string   // deepest existing directory on the way (when !exists)
	missing []string // components below parent that do not exist
	linked  bool     // a symlink was followed on the way
}

// resolve cleans a sandbox path (relative paths are from the work
// directory), refuses "..", and resolves it one component at a time with the
// archive API's stat, following symlinks inside the container; any step that
// lands in a forbidden tree is refused.
func (b *Backend) resolve(ctx context.Context, sb *sandbox, p string) (resolved, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return resolved{}, events.Errorf(events.CodeInvalidValue, "path is empty or has a NUL byte").With("field", "path")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return resolved{}, events.Errorf(events.CodeInvalidValue, "path %q has a '..' component", p).With("field", "path")
		}
	}
	if !path.IsAbs(p) {
		wd, err := b.workDir(ctx, sb)
		if err != nil {
			return resolved{}, err
		}
		p = path.Join(wd, p)
	}
	rest := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	if len(rest) == 1 && rest[0] == "" {
		rest = nil
	}
	cur := "/"
	links := 0
	linked := false
	for len(rest) > 0 {
		next := path.Join(cur, rest[0])
		if err := b.allowed(p, next); err != nil {
			return resolved{}, err
		}
		st, err := b.cli.ContainerStatPath(ctx, sb.containerID, next)
		if cerrdefs.IsNotFound(err) {
			return resolved{path: path.Join(append([]string{cur}, rest...)...), parent: cur, missing: rest, linked: linked}, nil
		}
		if err != nil {
			return resolved{}, b.containerErr(ctx, sb, "stat path", err)
		}
		if st.Mode&os.ModeSymlink != 0 {
			linked = true
			if links++; links > maxSymlinks {
				return resolved{}, events.Errorf(events.CodeInvalidValue, "path %q: too many levels of symbolic links", p).With("field", "path")
			}
			target := st.LinkTarget
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			target = path.Clean(target)
			if err := b.allowed(p, target); err != nil {
				return resolved{}, err
			}
			// Docker resolves the link within the container's root; resolve
			// what it points to again, one component at a time.
			rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest[1:]...)
			if len(rest) == 1 && rest[0] == "" {
				rest = nil
			}
			cur = "/"
			continue
		}
		cur = next
		rest = rest[1:]
		if len(rest) == 0 {
			return resolved{path: cur, exists: true, stat: st, linked: linked}, nil
		}
		if !st.Mode.IsDir() {
			return resolved{}, events.Errorf(events.CodeInvalidValue, "path %q: %s is not a directory", p, cur).With("field", "path")
		}
	}
	st, err := b.cli.ContainerStatPath(ctx, sb.containerID, "/")
	if err != nil {
		return resolved{}, b.containerErr(ctx, sb, "stat path", err)
	}
	return resolved{path: "/", exists: true, stat: st}, nil
}

// resolveStrict checks a path a container without the agent binary will
// write: no symlink anywhere on the way, and only below the work directory or
// /tmp. The checks give the usual errors early; what keeps the write to what
// the sandbox user could write itself is that it runs as that user
// (shellWrite): the sandbox can change the path after these checks.
func (b *Backend) resolveStrict(ctx context.Context, sb *sandbox, p string) (resolved, error) {
	res, err := b.resolve(ctx, sb, p)
	if err != nil {
		return res, err
	}
	if res.linked || res.exists && res.stat.Mode&os.ModeSymlink != 0 {
		return resolved{}, events.Errorf(events.CodePathIsSymlink, "path %q goes through a symbolic link; without the agent the files API follows none", p).With("field", "path")
	}
	wd, err := b.workDir(ctx, sb)
	if err != nil {
		return resolved{}, err
	}
	if !under(res.path, wd) && !under(res.path, "/tmp") {
		return resolved{}, events.Errorf(events.CodeForbidden, "path %q: without the agent only %s and /tmp are writable through the files API", p, wd).With("field", "path")
	}
	return res, nil
}

func (b *Backend) allowed(asked, p string) error {
	for _, r := range forbiddenRoots {
		if under(p, r) {
			return events.Errorf(events.CodeForbidden, "path %q leads to %s, outside the sandbox's filesystem", asked, p).With("field", "path")
		}
	}
	return nil
}

// containerFacts returns the sandbox's working directory and user (from its
// container's config, read once).
func (b *Backend) containerFacts(ctx context.Context, sb *sandbox) (workDir, user string, err error) {
	sb.mu.Lock()
	if sb.factsRead {
		defer sb.mu.Unlock()
		return sb.workDir, sb.user, nil
	}
	sb.mu.Unlock()
	ins, err := b.cli.ContainerInspect(ctx, sb.containerID)
	if err != nil {
		return "", "", b.containerErr(ctx, sb, "inspect", err)
	}
	workDir = "/"
	if ins.Config != nil {
		if ins.Config.WorkingDir != "" {
			workDir = ins.Config.WorkingDir
		}
		user = ins.Config.User
		if u := ins.Config.Labels[LabelUser]; u != "" {
			user = u // init runs as root; the processes as this user
		}
	}
	sb.mu.Lock()
	sb.workDir, sb.user, sb.factsRead = workDir, user, true
	sb.mu.Unlock()
	return workDir, user, nil
}

func (b *Backend) workDir(ctx context.Context, sb *sandbox) (string, error) {
	wd, _, err := b.containerFacts(ctx, sb)
	return wd, err
}

// numericOwner parses a "uid[:gid]" user; ok is false for user names.
func numericOwner(user string) (uid, gid int, ok bool) {
	if user == "" {
		return 0, 0, true
	}
	u, g, hasG := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil {
		return 0, 0, false
	}
	gid = uid
	if hasG {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// WriteFile writes r (size bytes, or until EOF when size < 0) to path,
// creating missing parent directories, owned by the sandbox's user.
func (b *Backend) WriteFile(ctx context.Context, sandboxID, p string, mode uint32, r io.Reader, size int64) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if done, err := b.agentWriteFile(ctx, sb, p, mode, r, size); done {
		return err
	}
	res, err := b.resolveStrict(ctx, sb, p)
	if err != nil {
		return err
	}
	if res.exists && res.stat.Mode.IsDir() {
		return events.Errorf(events.CodeInvalidValue, "path %q is a directory", p).With("field", "path")
	}
	if res.exists && !res.stat.Mode.IsRegular() {
		return events.Errorf(events.CodeInvalidValue, "path %q is not a regular file", p).With("field", "path")
	}
	dir, names := path.Dir(res.path), []string{path.Base(res.path)}
	if !res.exists {
		dir, names = res.parent, res.missing
	}
	if size < 0 {
		f, err := os.CreateTemp("", "sbx-write-*")
		if err != nil {
			return fmt.Errorf("dockerworker: spool file: %w", err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if size, err = io.Copy(f, r); err != nil {
			return fmt.Errorf("dockerworker: spool file: %w", err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("dockerworker: spool file: %w", err)
		}
		r = f
	}
	if mode == 0 {
		mode = 0o644
	}
	// As the sandbox user, never with the daemon's rights: the checks
	// above only make the usual errors early (ADR 43).
	return fileErr(p, b.shellWrite(ctx, sb, dir, names, mode&0o777, io.LimitReader(r, size), size))
}

// ReadFile streams a regular file to w and returns its size.
func (b *Backend) ReadFile(ctx context.Context, sandboxID, p string, w io.Writer) (int64, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return 0, err
	}
	if done, n, err := b.agentReadFile(ctx, sb, p, w); done {
		return n, err
	}
	res, err := b.resolve(ctx, sb, p)
	if err != nil {
		return 0, err
	}
	if !res.exists {
		return 0, events.Errorf(events.CodeFileNotFound, "no file %q", p).With("field", "path").With("reason", "not_found")
	}
	if !res.stat.Mode.IsRegular() {
		return 0, events.Errorf(events.CodeInvalidValue, "path %q is not a regular file", p).With("field", "path")
	}
	if lim := worker.ReadLimit(ctx); lim > 0 && res.stat.Size > lim {
		return 0, worker.FileTooLarge(p, res.stat.Size, lim) // st_size: a sparse file counts in full
	}
	rc, _, err := b.cli.CopyFromContainer(ctx, sb.containerID, res.path)
	if err != nil {
		return 0, b.containerErr(ctx, sb, "read file", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return 0, fmt.Errorf("dockerworker: read file archive: %w", err)
	}
	if h.Typeflag != tar.TypeReg {
		return 0, events.Errorf(events.CodeInvalidValue, "path %q is not a regular file", p).With("field", "path")
	}
	if lim := worker.ReadLimit(ctx); lim > 0 && h.Size > lim {
		return 0, worker.FileTooLarge(p, h.Size, lim) // swapped for a larger file since the stat
	}
	n, err := io.Copy(w, tr)
	if err != nil {
		return n, fmt.Errorf("dockerworker: read file: %w", err)
	}
	return n, nil
}

// ListFiles lists a directory (one level), or describes a single file.
func (b *Backend) ListFiles(ctx context.Context, sandboxID, p string) ([]events.FileInfo, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	if done, list, err := b.agentListFiles(ctx, sb, p); done {
		return list, err
	}
	res, err := b.resolve(ctx, sb, p)
	if err != nil {
		return nil, err
	}
	if !res.exists {
		return nil, events.Errorf(events.CodeFileNotFound, "no file or directory %q", p).With("field", "path").With("reason", "not_found")
	}
	shown := p
	if !path.IsAbs(shown) {
		shown = res.path
	}
	shown = path.Clean(shown)
	if !res.stat.Mode.IsDir() {
		return []events.FileInfo{fileInfo(path.Base(shown), shown, res.stat.Size, res.stat.Mode, res.stat.Mtime)}, nil
	}
	return b.shellList(ctx, sb, res.path, shown)
}

func fileInfo(name, p string, size int64, mode fs.FileMode, mt time.Time) events.FileInfo {
	if mode.IsDir() {
		size = 0
	}
	return events.FileInfo{Name: name, Path: p, Size: size, Mode: uint32(mode), IsDir: mode.IsDir(), ModTime: mt.UTC()}
}
