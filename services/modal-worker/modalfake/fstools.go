package modalfake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"
)

// fsCommand is the JSON argument of modal-sandbox-fs-tools: one key naming
// the operation (reference §5.1).
type fsCommand struct {
	ReadFile      *fsPath  `json:"ReadFile,omitempty"`
	WriteFile     *fsPath  `json:"WriteFile,omitempty"`
	ListFiles     *fsPath  `json:"ListFiles,omitempty"`
	Stat          *fsPath  `json:"Stat,omitempty"`
	MakeDirectory *fsMkdir `json:"MakeDirectory,omitempty"`
	Remove        *fsRm    `json:"Remove,omitempty"`
}

type fsPath struct {
	Path string `json:"path"`
}

type fsMkdir struct {
	Path    string `json:"path"`
	Parents *bool  `json:"parents"`
}

type fsRm struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

// FSFileInfo is the FileInfo JSON of fs-tools.
type FSFileInfo struct {
	Name          string  `json:"name"`
	Path          string  `json:"path"`
	Type          string  `json:"type"`
	Size          int64   `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  float64 `json:"modified_time"`
	SymlinkTarget *string `json:"symlink_target"`
}

type fsError struct {
	Kind    string `json:"error_kind"`
	Message string `json:"message"`
	Detail  string `json:"detail"`
}

func (e *fsError) Error() string { return e.Kind + ": " + e.Message }

// runFSTools is the built-in modal-sandbox-fs-tools: it works on the
// sandbox's directory (the processes' "/") through an os.Root, so nothing
// outside it can be reached, not even through symlinks.
func (s *Server) runFSTools(sb *sandbox, p *proc, args []string, pipe [2]bool) {
	out, err := s.fsTools(sb, p, args)
	if pipe[0] && len(out) > 0 {
		p.appendOut(0, out)
	}
	p.closeOut(0)
	code := int32(0)
	if err != nil {
		var fe *fsError
		if !errors.As(err, &fe) {
			fe = &fsError{Kind: "Other", Message: err.Error()}
		}
		b, _ := json.Marshal(fe)
		if pipe[1] {
			p.appendOut(1, b)
		}
		code = 1
	}
	p.closeOut(1)
	p.setExit(code, 0)
}

func (s *Server) fsTools(sb *sandbox, p *proc, args []string) ([]byte, error) {
	if len(args) != 2 {
		s.deviate("fs-tools: want exactly one JSON argument, got %d", len(args)-1)
		return nil, &fsError{Kind: "InvalidArgument", Message: "want one JSON argument"}
	}
	var cmd fsCommand
	dec := json.NewDecoder(strings.NewReader(args[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		s.deviate("fs-tools: argument %q does not match the Command enum: %v", args[1], err)
		return nil, &fsError{Kind: "InvalidArgument", Message: err.Error()}
	}
	root, err := os.OpenRoot(sb.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	rel := func(p string) (string, error) {
		if !path.IsAbs(p) {
			s.deviate("fs-tools: path %q is not absolute (the SDKs check this client-side)", p)
			return "", &fsError{Kind: "InvalidArgument", Message: "path must be absolute"}
		}
		c := path.Clean(p)
		if c == "/" {
			return ".", nil
		}
		return strings.TrimPrefix(c, "/"), nil
	}
	switch {
	case cmd.ReadFile != nil:
		r, err := rel(cmd.ReadFile.Path)
		if err != nil {
			return nil, err
		}
		fi, err := root.Stat(r)
		if err != nil {
			return nil, fsErr(err, cmd.ReadFile.Path)
		}
		if fi.IsDir() {
			return nil, &fsError{Kind: "IsDirectory", Message: "Is a directory", Detail: cmd.ReadFile.Path}
		}
		b, err := root.ReadFile(r)
		return b, fsErr(err, cmd.ReadFile.Path)
	case cmd.WriteFile != nil:
		r, err := rel(cmd.WriteFile.Path)
		if err != nil {
			return nil, err
		}
		// The data arrives on stdin; wait (bounded) for its end.
		p.stdinMu.Lock()
		bc, _ := p.stdin.(*bufferCloser)
		p.stdinMu.Unlock()
		if bc == nil {
			return nil, &fsError{Kind: "Other", Message: "no stdin"}
		}
		select {
		case <-bc.closed:
		case <-sb.done:
			return nil, &fsError{Kind: "Other", Message: "sandbox finished"}
		case <-time.After(5 * time.Minute):
			return nil, &fsError{Kind: "Other", Message: "stdin never closed"}
		}
		if dir := path.Dir(r); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return nil, fsErr(err, cmd.WriteFile.Path)
			}
		}
		if fi, err := root.Stat(r); err == nil && fi.IsDir() {
			return nil, &fsError{Kind: "IsDirectory", Message: "Is a directory", Detail: cmd.WriteFile.Path}
		}
		return nil, fsErr(root.WriteFile(r, bc.buf.Bytes(), 0o644), cmd.WriteFile.Path)
	case cmd.ListFiles != nil:
		r, err := rel(cmd.ListFiles.Path)
		if err != nil {
			return nil, err
		}
		fi, err := root.Stat(r)
		if err != nil {
			return nil, fsErr(err, cmd.ListFiles.Path)
		}
		if !fi.IsDir() {
			return nil, &fsError{Kind: "IsFile", Message: "Not a directory", Detail: cmd.ListFiles.Path}
		}
		f, err := root.Open(r)
		if err != nil {
			return nil, fsErr(err, cmd.ListFiles.Path)
		}
		names, err := f.Readdirnames(-1)
		_ = f.Close()
		if err != nil {
			return nil, fsErr(err, cmd.ListFiles.Path)
		}
		sort.Strings(names)
		infos := make([]FSFileInfo, 0, len(names))
		for _, n := range names {
			fi, err := root.Lstat(path.Join(r, n))
			if err != nil {
				continue
			}
			infos = append(infos, fileInfo(root, path.Join(path.Clean(cmd.ListFiles.Path), n), path.Join(r, n), fi))
		}
		return json.Marshal(infos)
	case cmd.Stat != nil:
		r, err := rel(cmd.Stat.Path)
		if err != nil {
			return nil, err
		}
		fi, err := root.Lstat(r)
		if err != nil {
			return nil, fsErr(err, cmd.Stat.Path)
		}
		return json.Marshal(fileInfo(root, path.Clean(cmd.Stat.Path), r, fi))
	case cmd.MakeDirectory != nil:
		r, err := rel(cmd.MakeDirectory.Path)
		if err != nil {
			return nil, err
		}
		if cmd.MakeDirectory.Parents == nil || *cmd.MakeDirectory.Parents {
			return nil, fsErr(root.MkdirAll(r, 0o755), cmd.MakeDirectory.Path)
		}
		if err := root.Mkdir(r, 0o755); errors.Is(err, fs.ErrExist) {
			return nil, &fsError{Kind: "PathAlreadyExists", Message: "File exists", Detail: cmd.MakeDirectory.Path}
		} else {
			return nil, fsErr(err, cmd.MakeDirectory.Path)
		}
	case cmd.Remove != nil:
		r, err := rel(cmd.Remove.Path)
		if err != nil {
			return nil, err
		}
		if cmd.Remove.Recursive {
			if _, err := root.Lstat(r); err != nil {
				return nil, fsErr(err, cmd.Remove.Path)
			}
			return nil, fsErr(root.RemoveAll(r), cmd.Remove.Path)
		}
		err = root.Remove(r)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, &fsError{Kind: "DirectoryNotEmpty", Message: "Directory not empty", Detail: cmd.Remove.Path}
		}
		return nil, fsErr(err, cmd.Remove.Path)
	}
	s.deviate("fs-tools: argument %q names no operation", args[1])
	return nil, &fsError{Kind: "InvalidArgument", Message: "no operation"}
}

func fsErr(err error, p string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return &fsError{Kind: "NotFound", Message: "No such file or directory", Detail: p}
	case errors.Is(err, fs.ErrPermission):
		return &fsError{Kind: "PermissionDenied", Message: "Permission denied", Detail: p}
	case errors.Is(err, syscall.ENOTDIR):
		return &fsError{Kind: "NotDirectory", Message: "Not a directory", Detail: p}
	case errors.Is(err, syscall.EISDIR):
		return &fsError{Kind: "IsDirectory", Message: "Is a directory", Detail: p}
	case strings.Contains(err.Error(), "path escapes from parent"):
		return &fsError{Kind: "PermissionDenied", Message: "path escapes the sandbox", Detail: p}
	}
	return &fsError{Kind: "Other", Message: err.Error(), Detail: p}
}

func fileInfo(root *os.Root, abs, rel string, fi os.FileInfo) FSFileInfo {
	t := "file"
	var target *string
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		t = "symlink"
		if l, err := root.Readlink(rel); err == nil {
			target = &l
		}
	case fi.IsDir():
		t = "directory"
	}
	owner, group := "", ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner, group = fmt.Sprint(st.Uid), fmt.Sprint(st.Gid)
		if st.Uid == 0 {
			owner = "root"
		}
		if st.Gid == 0 {
			group = "root"
		}
	}
	return FSFileInfo{Name: path.Base(abs), Path: abs, Type: t, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()),
		Permissions: fi.Mode().Perm().String(), Owner: owner, Group: group,
		ModifiedTime: float64(fi.ModTime().UnixNano()) / 1e9, SymlinkTarget: target}
}

// bufferCloser collects the stdin of a WriteFile.
type bufferCloser struct {
	buf    *bytes.Buffer
	closed chan struct{}
	once   bool
}

func (b *bufferCloser) Write(p []byte) (int, error) { return b.buf.Write(p) }
func (b *bufferCloser) Close() error {
	if !b.once {
		b.once = true
		close(b.closed)
	}
	return nil
}
