package e2bapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem"
	"github.com/sandboxio/sandboxio/internal/envdpb/filesystem/filesystemconnect"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// filesystemService is envd's filesystem.Filesystem over sandboxio's
// files.list (Stat, ListDir) and short execs of coreutils (MakeDir, Move,
// Remove). Watching is not served.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	a *API
}

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// maxListEntries bounds a ListDir of depth > 1.
const maxListEntries = 10000

// homeDir is where relative paths resolve, as envd resolves them against
// the user's home.
const homeDir = "/home/user"

// absPath resolves p as envd does: ~ and relative paths against the home
// directory; the result is clean and absolute.
func absPath(p string) (string, error) {
	if p == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path is empty"))
	}
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path is not valid"))
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = homeDir + p[1:]
	}
	if !path.IsAbs(p) {
		p = path.Join(homeDir, p)
	}
	return path.Clean(p), nil
}

// entryOf is envd's EntryInfo of a sandboxio FileInfo.
func entryOf(dir string, fi events.FileInfo) *filesystem.EntryInfo {
	p := fi.Path
	if p == "" {
		p = path.Join(dir, fi.Name)
	}
	mode := fs.FileMode(fi.Mode)
	typ := filesystem.FileType_FILE_TYPE_FILE
	if fi.IsDir {
		typ = filesystem.FileType_FILE_TYPE_DIRECTORY
		mode |= fs.ModeDir
	}
	e := &filesystem.EntryInfo{Name: fi.Name, Type: typ, Path: p, Size: fi.Size, Mode: uint32(mode.Perm()),
		Permissions: mode.String()}
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = timestamppb.New(fi.ModTime)
	}
	return e
}

// stat finds one entry by listing its parent.
func (s *filesystemService) stat(ctx context.Context, t *target, p string) (*filesystem.EntryInfo, error) {
	if p == "/" {
		return &filesystem.EntryInfo{Name: "/", Type: filesystem.FileType_FILE_TYPE_DIRECTORY, Path: "/",
			Mode: 0o755, Permissions: (fs.ModeDir | 0o755).String()}, nil
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	list, err := t.cl.ListFiles(ctx, t.id, dir)
	if err != nil {
		if errors.Is(err, events.ErrFileNotFound) {
			return nil, fileNotFound(p)
		}
		return nil, connectErrOf(err)
	}
	for _, fi := range list {
		if fi.Name == name {
			return entryOf(dir, fi), nil
		}
	}
	return nil, fileNotFound(p)
}

func fileNotFound(p string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: lstat %s: no such file or directory", p))
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	p, err := absPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := s.stat(ctx, targetOf(ctx), p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	t := targetOf(ctx)
	p, err := absPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := req.Msg.GetDepth()
	if depth < 1 {
		depth = 1
	}
	out := &filesystem.ListDirResponse{}
	var walk func(dir string, level uint32) error
	walk = func(dir string, level uint32) error {
		list, err := t.cl.ListFiles(ctx, t.id, dir)
		if err != nil {
			if errors.Is(err, events.ErrFileNotFound) {
				return connect.NewError(connect.CodeNotFound, fmt.Errorf("path not found: lstat %s: no such file or directory", dir))
			}
			return connectErrOf(err)
		}
		for _, fi := range list {
			if len(out.Entries) >= maxListEntries {
				return nil
			}
			e := entryOf(dir, fi)
			out.Entries = append(out.Entries, e)
			if fi.IsDir && level < depth {
				if err := walk(e.Path, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// run executes argv in the sandbox and returns its stderr on failure.
func (s *filesystemService) run(ctx context.Context, t *target, argv ...string) error {
	res, err := t.cl.Exec(ctx, events.ExecRequest{SandboxID: t.id, Cmd: argv, TimeoutMS: 30000})
	if err != nil {
		return connectErrOf(err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		return connect.NewError(connect.CodeInternal, fmt.Errorf("%s", truncate(msg, 512)))
	}
	return nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	t := targetOf(ctx)
	p, err := absPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if e, err := s.stat(ctx, t, p); err == nil {
		if e.Type == filesystem.FileType_FILE_TYPE_DIRECTORY {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	}
	if err := s.run(ctx, t, "mkdir", "-p", "--", p); err != nil {
		return nil, err
	}
	e, err := s.stat(ctx, t, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	t := targetOf(ctx)
	src, err := absPath(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := absPath(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	if _, err := s.stat(ctx, t, src); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: rename %s %s: no such file or directory", src, dst))
		}
		return nil, err
	}
	if err := s.run(ctx, t, "sh", "-c", `mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2"`, "mv", src, dst); err != nil {
		return nil, err
	}
	e, err := s.stat(ctx, t, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	t := targetOf(ctx)
	p, err := absPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	// envd's Remove of a missing path succeeds (os.RemoveAll).
	if err := s.run(ctx, t, "rm", "-rf", "--", p); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}
