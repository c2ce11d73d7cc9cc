package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Bounds of one cp: what a sandbox lists is hostile.
const (
	cpMaxFiles = 100000
	cpMaxDepth = 64
)

func cpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between a sandbox and here (as docker cp)",
		Long: `cp copies between a sandbox and the local file system; one side is SANDBOX:PATH.
  sandboxio cp ./data SANDBOX:/work        a directory into /work (/work/data)
  sandboxio cp SANDBOX:/work/out.csv .     a file out
  tar c dir | sandboxio cp - SANDBOX:/work a tar stream (stdin) unpacked into a directory
  sandboxio cp SANDBOX:/work - | tar t     a tar stream of a file or directory to stdout
As docker cp: a directory copied onto an existing directory goes inside it, onto a
path that does not exist it becomes that path; a file copied onto a directory (or a
path ending in /) goes inside it. Modes are kept; symbolic links are not copied.`,
		Args: cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, cl *client.Client, args []string) error {
			src, dst := parseCpArg(args[0]), parseCpArg(args[1])
			switch {
			case src.sandbox != "" && dst.sandbox != "":
				return usageErr(errors.New("cp: both sides are in a sandbox; copy to a local path first"))
			case src.sandbox == "" && dst.sandbox == "":
				return usageErr(errors.New("cp: one side must be SANDBOX:PATH"))
			case dst.sandbox != "":
				return g.copyIn(cmd.Context(), cl.Sandbox(dst.sandbox).Files(), src.path, dst.path)
			}
			return g.copyOut(cmd.Context(), cl.Sandbox(src.sandbox).Files(), src.path, dst.path)
		}),
	}
}

type cpArg struct{ sandbox, path string }

// parseCpArg reads SANDBOX:PATH; anything else (a path with a / before
// any colon, ., -) is local.
func parseCpArg(s string) cpArg {
	if id, p, ok := strings.Cut(s, ":"); ok && events.ValidID(id) && !strings.Contains(id, "/") {
		if p == "" {
			p = "."
		}
		return cpArg{sandbox: id, path: p}
	}
	return cpArg{path: s}
}

// remoteKind is what a sandbox path is: missing, a file or a directory.
type remoteKind int

const (
	remoteMissing remoteKind = iota
	remoteFile
	remoteDir
)

func statRemote(ctx context.Context, files *client.Files, p string) (remoteKind, []events.FileInfo, error) {
	entries, err := files.List(ctx, p)
	if errors.Is(err, events.ErrFileNotFound) {
		return remoteMissing, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	// A file lists as itself; a directory lists what it holds.
	if len(entries) == 1 && !entries[0].IsDir && !entries[0].FileMode().IsDir() && entries[0].Name == path.Base(path.Clean(p)) &&
		(entries[0].Path == "" || path.Clean(entries[0].Path) == path.Clean(p) || !path.IsAbs(p)) {
		return remoteFile, entries, nil
	}
	return remoteDir, entries, nil
}

// copyIn copies a local file, directory or tar stream (src "-") to dst
// in the sandbox.
func (g *globals) copyIn(ctx context.Context, files *client.Files, src, dst string) error {
	kind, _, err := statRemote(ctx, files, dst)
	if err != nil {
		return err
	}
	if src == "-" {
		if kind == remoteFile {
			return usageErr(fmt.Errorf("cp: %s is a file; a tar stream unpacks into a directory", dst))
		}
		if g.stdin == nil {
			return usageErr(errors.New("cp: - reads a tar stream from stdin, and there is none"))
		}
		return untarInto(ctx, files, g.stdin, dst)
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		target := dst
		if kind == remoteDir || strings.HasSuffix(dst, "/") {
			target = path.Join(dst, filepath.Base(src))
		}
		return putFile(ctx, files, src, target, st.Mode())
	}
	if kind == remoteFile {
		return usageErr(fmt.Errorf("cp: cannot copy directory %s onto file %s", src, dst))
	}
	root := dst
	if kind == remoteDir {
		root = path.Join(dst, filepath.Base(filepath.Clean(src)))
	}
	n := 0
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories are made with their files; links are not copied
		}
		if n++; n > cpMaxFiles {
			return fmt.Errorf("cp: more than %d files", cpMaxFiles)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return putFile(ctx, files, p, path.Join(root, filepath.ToSlash(rel)), info.Mode())
	})
}

func putFile(ctx context.Context, files *client.Files, local, remote string, mode fs.FileMode) error {
	data, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	return files.Write(ctx, remote, data, mode.Perm())
}

// untarInto writes the regular files of a tar stream under dir.
func untarInto(ctx context.Context, files *client.Files, r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cp: tar stream: %w", err)
		}
		if n >= cpMaxFiles {
			return fmt.Errorf("cp: more than %d entries in the tar stream", cpMaxFiles)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean("/" + h.Name)[1:] // no way out of dir
		if name == "" {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("cp: tar stream: %w", err)
		}
		if err := files.Write(ctx, path.Join(dir, name), data, fs.FileMode(h.Mode).Perm()); err != nil {
			return err
		}
	}
}

// remoteEntry is one file found under a sandbox path.
type remoteEntry struct {
	rel  string // slash-separated, relative to the copied root
	info events.FileInfo
}

// walkRemote lists the files under a sandbox directory, depth first.
func walkRemote(ctx context.Context, files *client.Files, dir, rel string, depth int, out *[]remoteEntry) error {
	if depth > cpMaxDepth {
		return fmt.Errorf("cp: %s is nested deeper than %d", dir, cpMaxDepth)
	}
	entries, err := files.List(ctx, dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\\") {
			continue // a hostile listing does not name a path outside dir
		}
		if len(*out) >= cpMaxFiles {
			return fmt.Errorf("cp: more than %d files", cpMaxFiles)
		}
		r := path.Join(rel, e.Name)
		switch m := e.FileMode(); {
		case e.IsDir || m.IsDir():
			*out = append(*out, remoteEntry{rel: r, info: e})
			if err := walkRemote(ctx, files, path.Join(dir, e.Name), r, depth+1, out); err != nil {
				return err
			}
		case m.Type() == 0:
			*out = append(*out, remoteEntry{rel: r, info: e})
		}
	}
	return nil
}

// copyOut copies a sandbox file or directory to dst here, or as a tar
// stream to stdout (dst "-").
func (g *globals) copyOut(ctx context.Context, files *client.Files, src, dst string) error {
	kind, _, err := statRemote(ctx, files, src)
	if err != nil {
		return err
	}
	if kind == remoteMissing {
		return events.Errorf(events.CodeFileNotFound, "no file or directory %s in the sandbox", src)
	}
	base := path.Base(path.Clean(src))
	var entries []remoteEntry
	if kind == remoteDir {
		entries = append(entries, remoteEntry{rel: "", info: events.FileInfo{IsDir: true, Mode: uint32(fs.ModeDir | 0o755)}})
		if err := walkRemote(ctx, files, src, "", 0, &entries); err != nil {
			return err
		}
	}
	if dst == "-" {
		return tarOut(ctx, files, g.stdout, src, base, kind, entries)
	}
	st, statErr := os.Stat(dst)
	dstDir := statErr == nil && st.IsDir()
	if kind == remoteFile {
		target := dst
		if dstDir {
			target = filepath.Join(dst, base)
		}
		return getFile(ctx, files, src, target, 0o644)
	}
	if statErr == nil && !dstDir {
		return usageErr(fmt.Errorf("cp: cannot copy directory %s onto file %s", src, dst))
	}
	root := dst
	if dstDir {
		root = filepath.Join(dst, base)
	}
	for _, e := range entries {
		local := filepath.Join(root, filepath.FromSlash(e.rel))
		if e.info.IsDir || e.info.FileMode().IsDir() {
			if err := os.MkdirAll(local, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := getFile(ctx, files, path.Join(src, e.rel), local, e.info.FileMode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func getFile(ctx context.Context, files *client.Files, remote, local string, mode fs.FileMode) error {
	data, err := files.Read(ctx, remote)
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	return os.WriteFile(local, data, mode)
}

// tarOut writes src as a tar stream whose entries are under base.
func tarOut(ctx context.Context, files *client.Files, w io.Writer, src, base string, kind remoteKind, entries []remoteEntry) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if kind == remoteFile {
		entries = []remoteEntry{{rel: "", info: events.FileInfo{Mode: 0o644}}}
	}
	for _, e := range entries {
		name := path.Join(base, e.rel)
		if e.info.IsDir || e.info.FileMode().IsDir() {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: now}); err != nil {
				return err
			}
			continue
		}
		data, err := files.Read(ctx, path.Join(src, e.rel))
		if err != nil {
			return err
		}
		mode := int64(e.info.FileMode().Perm())
		if mode == 0 {
			mode = 0o644
		}
		mt := e.info.ModTime
		if mt.IsZero() {
			mt = now
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mt}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}
