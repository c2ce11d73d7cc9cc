package modalworker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// FSToolsPath is the file helper Modal provides in every sandbox; each file
// operation is one exec of it with a JSON command as its only argument.
const FSToolsPath = "/__modal/.bin/modal-sandbox-fs-tools"

// maxReadBytes bounds a file read through the helper (it is held in memory
// by the router for offset resumes; Modal documents reads up to 5 GB, but
// sandboxio sends files over 512 KiB through the object store anyway).
const maxReadBytes = 1 << 30

// fsFileInfo is the helper's FileInfo JSON.
type fsFileInfo struct {
	Name         string  `json:"name"`
	Path         string  `json:"path"`
	Type         string  `json:"type"`
	Size         int64   `json:"size"`
	Mode         uint32  `json:"mode"`
	ModifiedTime float64 `json:"modified_time"`
}

// fsError is the helper's error JSON on stderr.
type fsError struct {
	Kind    string `json:"error_kind"`
	Message string `json:"message"`
	Detail  string `json:"detail"`
}

// filePath makes a path absolute (the helper takes absolute paths only;
// relative ones are taken from "/").
func filePath(p string) (string, error) {
	if p == "" {
		return "", events.Errorf(events.CodeInvalidValue, "empty path").With("field", "path")
	}
	if strings.ContainsRune(p, 0) {
		return "", events.Errorf(events.CodeInvalidValue, "path has a NUL byte").With("field", "path")
	}
	return path.Clean("/" + p), nil
}

// fsCommand encodes one helper command.
func fsCommand(op string, args map[string]any) string {
	b, _ := json.Marshal(map[string]any{op: args})
	return string(b)
}

// fsRun runs the helper and maps a failure.
func (b *Backend) fsRun(ctx context.Context, sandboxID, op, p string, args map[string]any, stdin []byte, stdout io.Writer) error {
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	code, stderr, err := b.runCapture(ctx, bx, []string{FSToolsPath, fsCommand(op, args)}, stdin, stdout)
	if err != nil {
		return err
	}
	if code == 0 {
		return nil
	}
	var fe fsError
	if json.Unmarshal(bytes.TrimSpace(stderr), &fe) != nil || fe.Kind == "" {
		return events.Errorf(events.CodeBackendError, "Modal file operation %s on %q failed with exit code %d", op, p, code)
	}
	return fileError(fe, op, p)
}

// fileError maps the helper's error kinds.
func fileError(fe fsError, op, p string) error {
	switch fe.Kind {
	case "NotFound":
		return events.Errorf(events.CodeFileNotFound, "no file or directory %q", p).With("field", "path").With("reason", "not_found")
	case "IsDirectory":
		return events.Errorf(events.CodeInvalidValue, "%q is a directory", p).With("field", "path").With("reason", "is_directory")
	case "NotDirectory", "IsFile", "AlreadyExists":
		return events.Errorf(events.CodeInvalidValue, "%q: a path component is not a directory", p).With("field", "path").With("reason", "not_directory")
	case "PermissionDenied":
		return events.Errorf(events.CodeForbidden, "%s %q: permission denied", op, p).With("field", "path")
	case "FileTooLarge":
		return events.Errorf(events.CodePayloadTooLarge, "%q is too large to read", p).With("field", "path")
	}
	return events.Errorf(events.CodeBackendError, "Modal file operation %s on %q: %s: %s", op, p, fe.Kind, fe.Message)
}

// WriteFile implements worker.FileSystem: the helper's WriteFile with the
// content on stdin (TaskExecStdinWriteStream), which creates parent
// directories; a mode other than 0644 is applied with chmod.
func (b *Backend) WriteFile(ctx context.Context, sandboxID, p string, mode uint32, r io.Reader, size int64) error {
	fp, err := filePath(p)
	if err != nil {
		return err
	}
	if size >= 0 {
		r = io.LimitReader(r, size)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("modalworker: read file content: %w", err)
	}
	if data == nil {
		data = []byte{}
	}
	if err := b.fsRun(ctx, sandboxID, "WriteFile", p, map[string]any{"path": fp}, data, io.Discard); err != nil {
		return err
	}
	if mode != 0 && mode&0o7777 != 0o644 {
		bx, err := b.lookup(ctx, sandboxID)
		if err != nil {
			return err
		}
		code, _, err := b.runCapture(ctx, bx, []string{"chmod", strconv.FormatUint(uint64(mode&0o7777), 8), fp}, nil, io.Discard)
		if err != nil {
			return err
		}
		if code != 0 {
			return events.Errorf(events.CodeBackendError, "chmod %o %s exited %d", mode&0o7777, p, code)
		}
	}
	return nil
}

// countingWriter counts and bounds what a read writes.
type countingWriter struct {
	w     io.Writer
	n     int64
	limit int64
}

var errTooLarge = errors.New("file too large")

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, errTooLarge
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadFile implements worker.FileSystem: the helper's ReadFile, whose
// stdout is the file.
func (b *Backend) ReadFile(ctx context.Context, sandboxID, p string, w io.Writer) (int64, error) {
	fp, err := filePath(p)
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: w, limit: maxReadBytes}
	err = b.fsRun(ctx, sandboxID, "ReadFile", p, map[string]any{"path": fp}, nil, cw)
	if errors.Is(err, errTooLarge) {
		return cw.n, events.Errorf(events.CodePayloadTooLarge, "%q is larger than %d bytes", p, maxReadBytes).With("field", "path")
	}
	return cw.n, err
}

// ListFiles implements worker.FileSystem: Stat, then ListFiles for a
// directory (a file lists as itself).
func (b *Backend) ListFiles(ctx context.Context, sandboxID, p string) ([]events.FileInfo, error) {
	fp, err := filePath(p)
	if err != nil {
		return nil, err
	}
	var st bytes.Buffer
	if err := b.fsRun(ctx, sandboxID, "Stat", p, map[string]any{"path": fp}, nil, &st); err != nil {
		return nil, err
	}
	var self fsFileInfo
	if err := json.Unmarshal(st.Bytes(), &self); err != nil {
		return nil, events.Errorf(events.CodeBackendError, "Modal's Stat of %q answered %d bytes that are not a FileInfo", p, st.Len())
	}
	if self.Type != "directory" {
		return []events.FileInfo{fileInfo(self)}, nil
	}
	var out bytes.Buffer
	if err := b.fsRun(ctx, sandboxID, "ListFiles", p, map[string]any{"path": fp}, nil, &out); err != nil {
		return nil, err
	}
	var entries []fsFileInfo
	if err := json.Unmarshal(out.Bytes(), &entries); err != nil {
		return nil, events.Errorf(events.CodeBackendError, "Modal's ListFiles of %q answered %d bytes that are not a FileInfo list", p, out.Len())
	}
	infos := make([]events.FileInfo, 0, len(entries))
	for _, e := range entries {
		infos = append(infos, fileInfo(e))
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Path < infos[j].Path })
	return infos, nil
}

func fileInfo(e fsFileInfo) events.FileInfo {
	sec, frac := math.Modf(e.ModifiedTime)
	return events.FileInfo{Name: e.Name, Path: e.Path, Size: e.Size, Mode: e.Mode & 0o7777, IsDir: e.Type == "directory",
		ModTime: time.Unix(int64(sec), int64(frac*1e9)).UTC()}
}
