package e2bfake

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem/filesystemconnect"
)

type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	sb *sandbox
}

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

var (
	nameCacheMu sync.Mutex
	userNames   = map[uint32]string{}
	groupNames  = map[uint32]string{}
)

func lookupNames(uid, gid uint32) (string, string) {
	nameCacheMu.Lock()
	defer nameCacheMu.Unlock()
	u, ok := userNames[uid]
	if c := credOf("user"); c != nil && uid == c.UID {
		u, ok = "user", true // the sandbox's user, whatever the host calls that uid
	}
	if !ok {
		u = strconv.Itoa(int(uid))
		if usr, err := user.LookupId(u); err == nil {
			u = usr.Username
		}
		userNames[uid] = u
	}
	g, ok := groupNames[gid]
	if c := credOf("user"); c != nil && gid == c.GID {
		g, ok = "user", true
	}
	if !ok {
		g = strconv.Itoa(int(gid))
		if grp, err := user.LookupGroupId(g); err == nil {
			g = grp.Name
		}
		groupNames[gid] = g
	}
	return u, g
}

// entryInfo builds envd's EntryInfo for a host path (lstat).
func (sb *sandbox) entryInfo(host string) (*filesystem.EntryInfo, error) {
	fi, err := os.Lstat(host)
	if err != nil {
		return nil, err
	}
	sp := sb.sandboxPath(host)
	e := &filesystem.EntryInfo{
		Name:         path.Base(sp),
		Path:         sp,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		if target, err := os.Readlink(host); err == nil {
			if filepath.IsAbs(target) {
				target = sb.sandboxPath(target)
			}
			e.SymlinkTarget = &target
		}
	case fi.IsDir():
		e.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	default:
		e.Type = filesystem.FileType_FILE_TYPE_FILE
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = lookupNames(st.Uid, st.Gid)
	}
	return e, nil
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	_, host := s.sb.hostPath(req.Msg.GetPath(), userFrom(ctx))
	e, err := s.sb.entryInfo(host)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connectErr(connect.CodeNotFound, "file not found: %s", s.sb.scrub(err.Error()))
		}
		return nil, connectErr(connect.CodeInternal, "error getting file info: %s", s.sb.scrub(err.Error()))
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	sp, host := s.sb.hostPath(req.Msg.GetPath(), userFrom(ctx))
	if fi, err := os.Stat(host); err == nil {
		if fi.IsDir() {
			return nil, connectErr(connect.CodeAlreadyExists, "directory already exists: %s", sp)
		}
		return nil, connectErr(connect.CodeInvalidArgument, "path already exists but it is not a directory: %s", sp)
	}
	created := s.sb.missingAncestors(host)
	if err := os.MkdirAll(host, 0o755); err != nil {
		return nil, connectErr(connect.CodeInternal, "error creating directory: %s", s.sb.scrub(err.Error()))
	}
	for _, d := range created {
		chownTo(d, userFrom(ctx))
		s.sb.watchers.notify(s.sb, d, filesystem.EventType_EVENT_TYPE_CREATE)
		s.sb.watchers.notify(s.sb, d, filesystem.EventType_EVENT_TYPE_CHMOD)
	}
	e, err := s.sb.entryInfo(host)
	if err != nil {
		return nil, connectErr(connect.CodeInternal, "error getting file info: %s", s.sb.scrub(err.Error()))
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

// missingAncestors lists host and its missing parents, outermost first.
func (sb *sandbox) missingAncestors(host string) []string {
	var out []string
	for p := host; p != sb.root && p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		out = append([]string{p}, out...)
	}
	return out
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	user := userFrom(ctx)
	_, src := s.sb.hostPath(req.Msg.GetSource(), user)
	_, dst := s.sb.hostPath(req.Msg.GetDestination(), user)
	if err := os.Rename(src, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connectErr(connect.CodeNotFound, "source file not found: %s", s.sb.scrub(err.Error()))
		}
		return nil, connectErr(connect.CodeInternal, "error renaming: %s", s.sb.scrub(err.Error()))
	}
	s.sb.watchers.notify(s.sb, src, filesystem.EventType_EVENT_TYPE_RENAME)
	s.sb.watchers.notify(s.sb, dst, filesystem.EventType_EVENT_TYPE_CREATE)
	e, err := s.sb.entryInfo(dst)
	if err != nil {
		return nil, connectErr(connect.CodeInternal, "error getting file info: %s", s.sb.scrub(err.Error()))
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	_, host := s.sb.hostPath(req.Msg.GetPath(), userFrom(ctx))
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	fi, err := os.Stat(host)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			_, lerr := os.Lstat(host)
			if lerr == nil {
				lerr = err
			}
			return nil, connectErr(connect.CodeNotFound, "path not found: %s", s.sb.scrub(lerr.Error()))
		}
		return nil, connectErr(connect.CodeInternal, "error getting file info: %s", s.sb.scrub(err.Error()))
	}
	if !fi.IsDir() {
		return nil, connectErr(connect.CodeInvalidArgument, "path is not a directory: %s", s.sb.sandboxPath(host))
	}
	out := &filesystem.ListDirResponse{}
	err = filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == host {
			return nil
		}
		rel, _ := filepath.Rel(host, p)
		level := strings.Count(rel, string(filepath.Separator)) + 1
		if level > depth {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e, err := s.sb.entryInfo(p); err == nil {
			out.Entries = append(out.Entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, connectErr(connect.CodeInternal, "error reading directory: %s", s.sb.scrub(err.Error()))
	}
	return connect.NewResponse(out), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	_, host := s.sb.hostPath(req.Msg.GetPath(), userFrom(ctx))
	_, statErr := os.Lstat(host)
	if err := os.RemoveAll(host); err != nil {
		return nil, connectErr(connect.CodeInternal, "error removing file or directory: %s", s.sb.scrub(err.Error()))
	}
	if statErr == nil {
		s.sb.watchers.notify(s.sb, host, filesystem.EventType_EVENT_TYPE_REMOVE)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// watchHub fans filesystem changes made through the fake (RPCs and /files)
// out to WatchDir streams. Changes made by processes are not observed.
type watchHub struct {
	mu       sync.Mutex
	watchers map[*watcher]struct{}
}

type watcher struct {
	dir          string // host path
	recursive    bool
	includeEntry bool
	ch           chan *filesystem.FilesystemEvent
}

func (h *watchHub) add(w *watcher) {
	h.mu.Lock()
	if h.watchers == nil {
		h.watchers = map[*watcher]struct{}{}
	}
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
}

func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
}

func (h *watchHub) notify(sb *sandbox, host string, typ filesystem.EventType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		rel, err := filepath.Rel(w.dir, host)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			continue
		}
		if !w.recursive && strings.Contains(rel, string(filepath.Separator)) {
			continue
		}
		ev := &filesystem.FilesystemEvent{Name: filepath.ToSlash(rel), Type: typ}
		if w.includeEntry && typ != filesystem.EventType_EVENT_TYPE_REMOVE && typ != filesystem.EventType_EVENT_TYPE_RENAME {
			if e, err := sb.entryInfo(host); err == nil {
				ev.Entry = e
			}
		}
		select {
		case w.ch <- ev:
		default: // a slow watcher loses events rather than blocking writers
		}
	}
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	sp, host := s.sb.hostPath(req.Msg.GetPath(), userFrom(ctx))
	fi, err := os.Stat(host)
	if err != nil {
		return connectErr(connect.CodeNotFound, "path %s not found: %s", sp, s.sb.scrub(err.Error()))
	}
	if !fi.IsDir() {
		return connectErr(connect.CodeInvalidArgument, "path %s not a directory", sp)
	}
	keepalive, ok := (&processService{sb: s.sb}).keepalive(req.Header())
	if !ok {
		keepalive = s.sb.srv.opts.DefaultKeepalive
	}
	w := &watcher{dir: host, recursive: req.Msg.GetRecursive(), includeEntry: req.Msg.GetIncludeEntry(), ch: make(chan *filesystem.FilesystemEvent, 256)}
	s.sb.watchers.add(w)
	defer s.sb.watchers.remove(w)
	sf := &streamFaults{sb: s.sb, f: s.sb.srv.dataFaults(s.sb)}
	gone := s.sb.goneCh()
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	sf.after()
	ticker := time.NewTicker(keepalive)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			panicAbort()
		case <-ticker.C:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			sf.after()
		case ev := <-w.ch:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			sf.after()
			ticker.Reset(keepalive)
		}
	}
}
