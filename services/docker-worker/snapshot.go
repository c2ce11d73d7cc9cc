package dockerworker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// What a snapshot holds: the trees the sandbox user can write, under runc
// and gVisor alike (gVisor's volumes are the host's, read the same way). On a
// read-only root (the tmpfs disk mode, or any read-only root) those are the
// container's volumes: the work directory, /tmp and the user's home
// (disk.go). On a writable root they are the work directory, the home, /tmp
// and /var/tmp; changes elsewhere in the writable layer (a root image's
// package installs outside them) are not kept. Memory and processes are
// never kept: runc cannot checkpoint without CRIU, which this backend does
// not use.

// pauser freezes and thaws a container's processes (the cgroup freezer).
type pauser interface {
	ContainerPause(ctx context.Context, containerID string) error
	ContainerUnpause(ctx context.Context, containerID string) error
}

var (
	_ worker.Snapshotter = (*Backend)(nil)
	_ worker.Thawer      = (*Backend)(nil)
)

// snapshotRoots are the absolute paths a snapshot of the container holds.
func (b *Backend) snapshotRoots(ctx context.Context, containerID string) ([]string, error) {
	c, err := b.cli.ContainerInspect(ctx, containerID)
	if err != nil {
		return nil, fmt.Errorf("dockerworker: inspect %s: %w", containerID, err)
	}
	var roots []string
	add := func(p string) {
		p = path.Clean(p)
		if !path.IsAbs(p) || p == "/" || under(p, stateDir) || p == stateDir || slices.Contains(roots, p) {
			return
		}
		roots = append(roots, p)
	}
	for _, m := range c.Mounts {
		if m.Type == mount.TypeVolume && m.RW {
			add(m.Destination)
		}
	}
	if c.HostConfig != nil && !c.HostConfig.ReadonlyRootfs {
		wd := b.cfg.WorkDir
		if c.Config != nil && c.Config.WorkingDir != "" {
			wd = c.Config.WorkingDir
		}
		add(wd)
		if c.Config != nil {
			if f, err := b.ensureImage(ctx, c.Config.Image); err == nil && f.home != "" {
				add(f.home)
			}
		}
		add("/tmp")
		add("/var/tmp")
	}
	// Nested roots go with their parent.
	slices.Sort(roots)
	out := roots[:0]
	for _, r := range roots {
		if len(out) > 0 && under(r, out[len(out)-1]) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Snapshot writes the sandbox's writable trees to w as one tar, each entry
// named by its absolute path without the leading slash, while the
// container is frozen. With final it stays frozen (it is removed next).
func (b *Backend) Snapshot(ctx context.Context, sandboxID string, w io.Writer, final bool) (worker.SnapshotStats, error) {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.SnapshotStats{}, err
	}
	p, ok := b.cli.(pauser)
	if !ok {
		return worker.SnapshotStats{}, events.Errorf(events.CodeCapabilityNotSupp, "the docker client cannot freeze containers").
			With("capability", string(events.CapSnapshot))
	}
	roots, err := b.snapshotRoots(ctx, sb.containerID)
	if err != nil {
		return worker.SnapshotStats{}, err
	}
	if sb.runtime == RuntimeRunsc {
		// gVisor may hold written data in its own page cache: sync writes
		// it through to the volumes the archive API reads (best effort;
		// an image without sync keeps what was already written back).
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = b.dockerExec(sctx, sb, true, worker.Process{Cmd: []string{"sync"}, Stdout: io.Discard, Stderr: io.Discard}, "")
		cancel()
	}
	// The agent freezes with its sandbox: its client must not take the
	// silence for a hang (that would end the agent channel for good).
	thawAgent := func() {}
	if cl := sb.agentOf(); cl != nil {
		thawAgent = cl.Freeze()
	}
	if err := p.ContainerPause(ctx, sb.containerID); err != nil {
		thawAgent()
		return worker.SnapshotStats{}, fmt.Errorf("dockerworker: freeze %s: %w", sandboxID, err)
	}
	thaw := !final
	defer func() {
		if thaw {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), thawTimeout)
			defer cancel()
			_ = p.ContainerUnpause(tctx, sb.containerID)
		}
		thawAgent()
	}()
	stats := worker.SnapshotStats{Roots: roots}
	uid, _ := b.sandboxUID(ctx, sb)
	tw := tar.NewWriter(w)
	for _, root := range roots {
		n, err := b.copyRoot(ctx, sb.containerID, root, tw, uid)
		stats.Files += n
		if err != nil {
			thaw = true
			return stats, err
		}
	}
	if err := tw.Close(); err != nil {
		thaw = true
		return stats, err
	}
	return stats, nil
}

// killTimeout bounds a thaw after the caller gave up.
const thawTimeout = 30 * time.Second

// copyRoot appends the tree at root (from the archive API: entries named
// base(root)/…) to tw, renamed to root/… without the leading slash.
func (b *Backend) copyRoot(ctx context.Context, containerID, root string, tw *tar.Writer, uid int) (int64, error) {
	rc, _, err := b.cli.CopyFromContainer(ctx, containerID, root)
	if err != nil {
		return 0, fmt.Errorf("dockerworker: read %s: %w", root, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	base := path.Base(root)
	prefix := strings.TrimPrefix(root, "/")
	var n int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("dockerworker: read %s: %w", root, err)
		}
		name, ok := rebase(h.Name, base, prefix)
		if !ok {
			return n, fmt.Errorf("dockerworker: read %s: unexpected entry %q", root, h.Name)
		}
		h.Name = name
		if uid >= 0 && h.Uid == uid {
			// The sandbox user's: a sandbox restored from it may have
			// another uid of its own (ownuid.go).
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[paxSandboxUser] = "1"
			h.Format = tar.FormatPAX
		}
		if h.Typeflag == tar.TypeLink {
			if h.Linkname, ok = rebase(h.Linkname, base, prefix); !ok {
				return n, fmt.Errorf("dockerworker: read %s: unexpected link %q", root, h.Linkname)
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return n, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return n, err
			}
		}
		n++
	}
}

// paxSandboxUser marks a snapshot entry owned by the sandbox user.
const paxSandboxUser = "SBX.sandbox_user"

// sandboxUID is the sandbox user's numeric uid, -1 when its user is a
// name (the image's, the same in every sandbox of the image).
func (b *Backend) sandboxUID(ctx context.Context, sb *sandbox) (int, error) {
	_, user, err := b.containerFacts(ctx, sb)
	if err != nil {
		return -1, err
	}
	uid, err := strconv.Atoi(uidOf(user))
	if err != nil || user == "" {
		return -1, nil
	}
	return uid, nil
}

// rebase renames base/rest to prefix/rest.
func rebase(name, base, prefix string) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	trimmed := strings.TrimSuffix(name, "/")
	switch {
	case trimmed == base:
		return prefix + strings.TrimPrefix(name, trimmed), true
	case strings.HasPrefix(name, base+"/"):
		return prefix + name[len(base):], true
	}
	return "", false
}

// Thaw unfreezes a sandbox a final Snapshot left frozen.
func (b *Backend) Thaw(ctx context.Context, sandboxID string) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	p, ok := b.cli.(pauser)
	if !ok {
		return nil
	}
	return p.ContainerUnpause(ctx, sb.containerID)
}

// Restore extracts a Snapshot's tar into the sandbox, root by root, with
// the archive API (owners and modes as the tar has them, the daemon's user
// namespace mapping applied). Entries outside roots are refused.
func (b *Backend) Restore(ctx context.Context, sandboxID string, r io.Reader, roots []string) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	uid, err := b.sandboxUID(ctx, sb)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var (
		cur  string
		pw   *io.PipeWriter
		tw   *tar.Writer
		done chan error
	)
	finish := func() error {
		if pw == nil {
			return nil
		}
		cerr := tw.Close()
		_ = pw.CloseWithError(cerr)
		err := <-done
		pw, tw = nil, nil
		if cerr != nil {
			return cerr
		}
		return err
	}
	abort := func(err error) error {
		if pw != nil {
			_ = pw.CloseWithError(err)
			<-done
		}
		return err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return finish()
		}
		if err != nil {
			return abort(err)
		}
		abs := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
		root := ""
		for _, rt := range roots {
			if abs == rt || under(abs, rt) {
				root = rt
				break
			}
		}
		if root == "" || strings.Contains(h.Name, "..") {
			return abort(fmt.Errorf("dockerworker: snapshot entry %q is outside the sandbox's writable places", h.Name))
		}
		if root != cur {
			if err := finish(); err != nil {
				return err
			}
			cur = root
			var pr *io.PipeReader
			pr, pw = io.Pipe()
			tw = tar.NewWriter(pw)
			done = make(chan error, 1)
			go func(root string) { // waited for by finish or abort
				err := b.cli.CopyToContainer(ctx, sb.containerID, root, pr, container.CopyToContainerOptions{})
				_ = pr.CloseWithError(err)
				done <- err
			}(root)
		}
		if h.PAXRecords[paxSandboxUser] != "" {
			delete(h.PAXRecords, paxSandboxUser)
			if uid >= 0 {
				h.Uid = uid
			}
		}
		rel := strings.TrimPrefix(abs, root)
		h.Name = "." + rel
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			target := "/" + strings.TrimPrefix(h.Linkname, "/")
			if !under(target, root) {
				return abort(fmt.Errorf("dockerworker: snapshot link %q leaves its tree", h.Linkname))
			}
			h.Linkname = "." + strings.TrimPrefix(target, root)
		}
		if err := tw.WriteHeader(h); err != nil {
			return abort(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return abort(err)
			}
		}
	}
}
