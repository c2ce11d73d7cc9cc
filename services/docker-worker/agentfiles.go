package dockerworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Files go through the agent, as the sandbox user and with no symlink
// escape (internal/agent/server): the long-lived agent when the sandbox has
// one, else the same code as a one-shot `sbx-agent files` Docker exec as the
// sandbox user. Only a container without the agent binary at all uses the
// archive API, which runs with the daemon's rights: there, writes are limited
// to the work directory and /tmp, with no symlink anywhere on the path.

// absPath checks a sandbox path and makes it absolute and clean (relative
// paths are from the work directory).
func (b *Backend) absPath(ctx context.Context, sb *sandbox, p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", events.Errorf(events.CodeInvalidValue, "path is empty or has a NUL byte").With("field", "path")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", events.Errorf(events.CodeInvalidValue, "path %q has a '..' component", p).With("field", "path")
		}
	}
	if !path.IsAbs(p) {
		wd, err := b.workDir(ctx, sb)
		if err != nil {
			return "", err
		}
		p = path.Join(wd, p)
	}
	p = path.Clean(p)
	if err := b.allowed(p, p); err != nil {
		return "", err
	}
	if len(p) > proto.MaxPath {
		return "", events.Errorf(events.CodeInvalidValue, "path is longer than %d bytes", proto.MaxPath).With("field", "path")
	}
	return p, nil
}

func (b *Backend) agentWriteFile(ctx context.Context, sb *sandbox, p string, mode uint32, r io.Reader, size int64) (bool, error) {
	cl := sb.agentOf()
	if cl == nil && !sb.hasAgent {
		return false, nil
	}
	ap, err := b.absPath(ctx, sb, p)
	if err != nil {
		return true, err
	}
	if size < 0 {
		f, err := os.CreateTemp("", "sbx-write-*")
		if err != nil {
			return true, fmt.Errorf("dockerworker: spool file: %w", err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if size, err = io.Copy(f, r); err != nil {
			return true, fmt.Errorf("dockerworker: spool file: %w", err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return true, fmt.Errorf("dockerworker: spool file: %w", err)
		}
		r = f
	}
	if mode == 0 {
		mode = 0o644
	}
	if cl != nil {
		if err := cl.Write(ctx, ap, mode&0o777, r, size); err != nil {
			return true, b.fileFailed(ctx, sb, ap, err)
		}
		return true, nil
	}
	err = b.helper(ctx, sb, "", []string{"files", "write", ap, "--mode", strconv.FormatUint(uint64(mode&0o777), 8),
		"--parents", "--size", strconv.FormatInt(size, 10)}, io.LimitReader(r, size), nil)
	return true, fileErr(ap, err)
}

func (b *Backend) agentReadFile(ctx context.Context, sb *sandbox, p string, w io.Writer) (bool, int64, error) {
	cl := sb.agentOf()
	if cl == nil && !sb.hasAgent {
		return false, 0, nil
	}
	ap, err := b.absPath(ctx, sb, p)
	if err != nil {
		return true, 0, err
	}
	// The agent refuses a file over the read limit by its size (st_size:
	// a sparse file counts in full) before it sends a byte.
	lim := worker.ReadLimit(ctx)
	if cl != nil {
		n, err := cl.Read(ctx, ap, lim, w)
		if err != nil {
			if e := readTooLarge(ap, lim, err); e != err {
				return true, n, e
			}
			return true, n, b.fileFailed(ctx, sb, ap, err)
		}
		return true, n, nil
	}
	args := []string{"files", "read", ap}
	if lim > 0 {
		args = append(args, "--max", strconv.FormatInt(lim, 10))
	}
	cw := &sizeWriter{w: w}
	err = b.helper(ctx, sb, "", args, nil, cw)
	return true, cw.n, fileErr(ap, readTooLarge(ap, lim, err))
}

// readTooLarge turns the agent's refusal of a file over the read limit into
// FileReadTooLarge; other errors pass.
func readTooLarge(p string, lim int64, err error) error {
	var pe *proto.Error
	if lim > 0 && errors.As(err, &pe) && pe.Kind == proto.ErrTooLarge {
		return events.Errorf(events.CodeFileReadTooLarge, "%s is more than files.read returns (%d bytes)", p, lim).
			With("field", "path").With("limit", lim)
	}
	return err
}

func (b *Backend) agentListFiles(ctx context.Context, sb *sandbox, p string) (bool, []events.FileInfo, error) {
	cl := sb.agentOf()
	if cl == nil && !sb.hasAgent {
		return false, nil, nil
	}
	ap, err := b.absPath(ctx, sb, p)
	if err != nil {
		return true, nil, err
	}
	var r proto.Result
	if cl != nil {
		if r.Files, r.Stat, _, err = cl.List(ctx, ap); err != nil {
			return true, nil, b.fileFailed(ctx, sb, ap, err)
		}
	} else {
		var out bytes.Buffer
		if err := b.helper(ctx, sb, "", []string{"files", "list", ap}, nil, &limitedBuffer{b: &out, max: proto.MaxControl}); err != nil {
			return true, nil, fileErr(ap, err)
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return true, nil, fmt.Errorf("dockerworker: list files: %w", err)
		}
		if err := r.Validate(); err != nil {
			return true, nil, fmt.Errorf("dockerworker: list files: %w", err)
		}
	}
	shown := path.Clean(p)
	if !path.IsAbs(shown) {
		shown = ap
	}
	if r.Stat != nil {
		return true, []events.FileInfo{fileInfo(path.Base(shown), shown, r.Stat.Size, fs.FileMode(r.Stat.Mode), time.Unix(0, r.Stat.ModTime))}, nil
	}
	out := make([]events.FileInfo, 0, len(r.Files))
	for _, f := range r.Files {
		out = append(out, fileInfo(f.Name, path.Join(shown, f.Name), f.Size, fs.FileMode(f.Mode), time.Unix(0, f.ModTime)))
	}
	return true, out, nil
}

// fileFailed classifies a file operation's error from the agent.
func (b *Backend) fileFailed(ctx context.Context, sb *sandbox, p string, err error) error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return fileErr(p, err)
	}
	return b.agentFailed(ctx, sb, err)
}

// helper runs a one-shot sbx-agent command through a Docker exec: the static
// binary the worker supplies, never the image's shell or tools, immune to
// LD_PRELOAD and PATH in the container's environment. user "" is the
// sandbox user.
func (b *Backend) helper(ctx context.Context, sb *sandbox, user string, args []string, stdin io.Reader, stdout io.Writer) error {
	var stderr bytes.Buffer
	st, err := b.dockerExec(ctx, sb, true, worker.Process{Cmd: append([]string{agentPath}, args...), Stdin: stdin,
		Stdout: stdout, Stderr: &limitedBuffer{b: &stderr, max: 4096}}, user)
	if err != nil {
		return err
	}
	if st.Code == 0 {
		return nil
	}
	msg := strings.TrimSpace(strings.TrimPrefix(stderr.String(), "sbx-agent: "))
	for kind, code := range helperKinds {
		if code == st.Code {
			return &proto.Error{Kind: kind, Message: msg}
		}
	}
	return fmt.Errorf("dockerworker: sbx-agent %s: exit %d: %s", args[0], st.Code, msg)
}

// helperKinds mirrors cmd/sbx-agent's exit codes by error kind.
var helperKinds = map[string]int{
	proto.ErrNotFound: 10, proto.ErrExists: 11, proto.ErrPermission: 12, proto.ErrForbidden: 13,
	proto.ErrSymlink: 14, proto.ErrNotDir: 15, proto.ErrIsDir: 16, proto.ErrNotRegular: 17,
	proto.ErrTooLarge: 18, proto.ErrInvalid: 19, proto.ErrIO: 20,
}

type sizeWriter struct {
	w io.Writer
	n int64
}

func (c *sizeWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitedBuffer keeps at most max bytes and drops the rest.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// WatchFiles implements worker.FileWatcher through the sandbox's agent, as
// the sandbox user; a sandbox without the agent cannot watch.
func (b *Backend) WatchFiles(ctx context.Context, sandboxID string, r events.FilesWatchRequest) (events.FilesWatchReply, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return events.FilesWatchReply{}, err
	}
	p, err := b.absPath(ctx, sb, r.Path)
	if err != nil {
		return events.FilesWatchReply{}, err
	}
	cl := sb.agentOf()
	if cl == nil {
		return events.FilesWatchReply{}, events.Errorf(events.CodeCapabilityNotSupp, "sandbox %s runs without the agent: files.watch needs it", sandboxID).
			With("capability", string(events.CapFilesWatch))
	}
	r = r.WithDefaults() // the agent refuses a watch of 0 events as a protocol violation
	evs, truncated, gone, err := cl.Watch(ctx, p, time.Duration(r.TimeoutMS)*time.Millisecond, r.MaxEvents)
	if err != nil {
		var pe *proto.Error
		if errors.As(err, &pe) {
			if pe.Kind == proto.ErrBusy {
				return events.FilesWatchReply{}, events.Errorf(events.CodeOverloaded, "sandbox %s: %s", sandboxID, pe.Message)
			}
			if e := watchLimit(sandboxID, p, pe); e != nil {
				return events.FilesWatchReply{}, e
			}
			return events.FilesWatchReply{}, fileErr(p, err)
		}
		return events.FilesWatchReply{}, b.agentFailed(ctx, sb, err)
	}
	out := events.FilesWatchReply{Events: make([]events.FileEvent, 0, len(evs)), Truncated: truncated, Gone: gone}
	for _, ev := range evs {
		out.Events = append(out.Events, events.FileEvent{Type: ev.Type, Path: ev.Path, IsDir: ev.IsDir})
	}
	return out, nil
}

// watchLimit is SBX_E1312 for an agent's watch that failed because the
// sandbox user's inotify limits are used up: inotify_init's EMFILE
// (max_user_instances) or ENFILE, inotify_add_watch's ENOSPC
// (max_user_watches). The agent reports these as I/O errors whose
// message is the call and the errno's text (its errnoErr); nil for any
// other error.
func watchLimit(sandboxID, p string, pe *proto.Error) error {
	if pe.Kind != proto.ErrIO {
		return nil
	}
	for _, c := range []struct {
		call  string
		errno unix.Errno
		limit string
	}{
		{"inotify", unix.EMFILE, "fs.inotify.max_user_instances"},
		{"inotify", unix.ENFILE, "the host's open files"},
		{"watch " + p, unix.ENOSPC, "fs.inotify.max_user_watches"},
	} {
		if pe.Message == c.call+": "+c.errno.Error() {
			return events.Errorf(events.CodeWatchLimit, "sandbox %s: files.watch %s: %s (%s)", sandboxID, p, c.errno.Error(), c.limit).
				With("path", p).With("limit", c.limit)
		}
	}
	return nil
}
