package client

import (
	"context"
	"io/fs"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Files is a sandbox's file system. Content of any size and any bytes
// moves through it: up to events.MaxInlineFileBytes in one request, larger
// files in parts through the object store (files.put, files.get), which
// the handle does for the caller.
type Files struct{ sb *Sandbox }

// Write creates or replaces the file at path with data; mode 0 is 0644.
// Parent directories are created as the backend does (docker: yes).
func (f *Files) Write(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return f.sb.c.WriteFile(ctx, f.sb.SandboxID, path, data, uint32(mode.Perm()))
}

// Read returns the content of the file at path; a path with no file is
// events.ErrFileNotFound.
func (f *Files) Read(ctx context.Context, path string) ([]byte, error) {
	return f.sb.c.ReadFile(ctx, f.sb.SandboxID, path)
}

// List lists the directory at path. Each entry's Mode holds Go's
// fs.FileMode bits (FileInfo.FileMode decodes them).
func (f *Files) List(ctx context.Context, path string) ([]events.FileInfo, error) {
	return f.sb.c.ListFiles(ctx, f.sb.SandboxID, path)
}

// Remove removes the file or directory (with what it holds) at path; a
// path that does not exist is not an error, as with rm -f. The protocol
// has no remove op: it runs rm -rf in the sandbox, so the sandbox needs
// an rm (every sandboxio image has one).
func (f *Files) Remove(ctx context.Context, path string) error {
	if path == "" {
		return events.Errorf(events.CodeMissingField, "remove: empty path").With("field", "path")
	}
	res, err := f.sb.Exec(ctx, []string{"rm", "-rf", "--", path})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return events.Errorf(events.CodeExecFailed, "rm -rf %s exited %d: %s", path, res.ExitCode, truncate(res.Stderr, 512))
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
