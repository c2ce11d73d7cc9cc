package dockerworker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
)

// A host uid of its own for each runc sandbox (ADR 31). The kernel keeps
// some limits per user (inotify instances and watches, RLIMIT_NPROC,
// pending signals, message queues): sandboxes that shared host uid 1000
// shared them, so one could deny another. A runc sandbox runs as a uid of
// its own from [ownUIDBase, ownUIDBase+ownUIDRange), with the image user's
// gid. Its /work and home are the uid's: tmpfs volumes made for it (a
// read-only root under a disk quota), or, in a writable root, the image's
// directories given to it through the archive API before the start. The
// uid is the container's LabelUser, which every other part of the backend
// (the agent's user, files, docker execs, a restarted worker) already reads.
//
// No two containers of the host with a LabelUser share one: an allocation
// starts at a hash of the container's name and takes the next uid that no
// container of the daemon (any worker's, stopped ones included) is labelled
// with, nor another create under way in this worker.
const (
	ownUIDBase  = 0x40000000
	ownUIDRange = 1 << 24
)

// uidState is the allocator's memory between a create's container list and
// its container appearing in the daemon's lists. The zero value is ready.
type uidState struct {
	mu sync.Mutex
	// taken are uids this worker handed out: zero time while their create
	// is under way, else when its container was made (a list begun before
	// that may not show it).
	taken map[int]time.Time
	// passwd is each image's /etc/passwd by image id (nil: it has none).
	passwd map[string][]byte
}

// ownsUID reports whether a container of shape sh gets a uid of its own:
// runc (gVisor keeps these limits per sandbox already), no daemon-wide
// remapping (so large a uid is outside the remapped range), a non-root
// image user, and a /work and home that can be the uid's: tmpfs volumes
// (a read-only root under a quota) or a writable root's own directories.
// A read-only root without a quota (its /work an anonymous volume copied
// from the image) keeps the image's uid.
func (b *Backend) ownsUID(sh shape, user string) bool {
	if sh.runtime != "" && sh.runtime != "runc" {
		return false
	}
	if b.userns.enabled || b.disk == DiskNone && sh.readOnly {
		return false
	}
	u, _ := ownerOf(user)
	return u != "0"
}

// writableRoot reports whether a container of sh has a writable root
// (applyDisk's rule).
func (b *Backend) writableRoot(sh shape) bool { return !sh.readOnly && b.disk != DiskTmpfs }

// allocUID picks the uid of the container name: free on the daemon and in
// this worker. release, called once the container is created or its create
// failed, lets a later list account for it.
func (b *Backend) allocUID(ctx context.Context, name string) (uid int, release func(created bool), err error) {
	listed := time.Now()
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelUser))})
	if err != nil {
		return 0, nil, fmt.Errorf("dockerworker: list the host's sandbox uids: %w", err)
	}
	used := make(map[int]bool, len(list))
	for _, c := range list {
		if u, err := strconv.Atoi(uidOf(c.Labels[LabelUser])); err == nil {
			used[u] = true
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	start := int(h.Sum32() % ownUIDRange)
	s := &b.uids
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		s.taken = make(map[int]time.Time)
	}
	for u, at := range s.taken {
		if !at.IsZero() && at.Before(listed.Add(-time.Minute)) {
			delete(s.taken, u) // every list from now on shows it
		}
	}
	for i := range len(used) + len(s.taken) + 1 {
		u := ownUIDBase + (start+i)%ownUIDRange
		if at, ok := s.taken[u]; used[u] || ok && (at.IsZero() || !at.Before(listed)) {
			continue
		}
		s.taken[u] = time.Time{}
		return u, func(created bool) { s.release(u, created) }, nil
	}
	return 0, nil, errors.New("dockerworker: no free sandbox uid") // unreachable: len(used)+len(taken)+1 candidates
}

func (s *uidState) release(u int, created bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if created {
		s.taken[u] = time.Now()
		return
	}
	delete(s.taken, u)
}

// ownedUser is a container's own uid: the /etc/passwd that names it (nil
// when the image has none), and for a writable root what the archive API
// gives it before the start (rootTar).
type ownedUser struct {
	uid, gid int
	passwd   []byte
	writable bool // a writable root: its /work and home are the image's
	workDir  string
	home     string
	release  func(created bool) // as allocUID's
}

// ownUser gives a container of sh its own uid when ownsUID says so:
// facts with that user, the environment with HOME. The ownedUser is nil
// when the image's user is kept.
func (b *Backend) ownUser(ctx context.Context, name string, sh shape, facts imageFacts, env []string) (imageFacts, []string, *ownedUser, error) {
	if !b.ownsUID(sh, facts.user) {
		return facts, env, nil, nil
	}
	passwd, err := b.imagePasswd(ctx, facts.id)
	if err != nil {
		return facts, env, nil, err
	}
	uid, release, err := b.allocUID(ctx, name)
	if err != nil {
		return facts, env, nil, err
	}
	imgUID, gid := ownerOf(facts.user)
	g, _ := strconv.Atoi(gid)
	facts.user = strconv.Itoa(uid) + ":" + gid
	if facts.home != "" && !hasEnv(env, "HOME") {
		env = append([]string{"HOME=" + facts.home}, env...)
	}
	return facts, env, &ownedUser{uid: uid, gid: g, passwd: passwdWith(passwd, imgUID, uid, gid),
		writable: b.writableRoot(sh), workDir: facts.workDir, home: facts.home, release: release}, nil
}

// rootTar is what a writable root gets before its start, extracted at /
// (nil for none): the work directory (0755) and the home (0700) owned by
// the uid (the directory itself: what the image put in it stays the
// image's), and, unless it is bind-mounted (mounted), the /etc/passwd.
func (o *ownedUser) rootTar(mounted bool) ([]byte, error) {
	if o == nil || !o.writable {
		return nil, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, d := range []struct {
		dir  string
		mode int64
	}{{o.workDir, 0o755}, {o.home, 0o700}} {
		if d.dir == "" || path.Clean(d.dir) != d.dir || !path.IsAbs(d.dir) || d.dir == "/" || d.dir == "/tmp" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d.dir, "/") + "/", Mode: d.mode,
			Uid: o.uid, Gid: o.gid, ModTime: now, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if o.passwd != nil && !mounted {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(o.passwd)),
			ModTime: now, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(o.passwd); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// passwdWith is passwd with a first line for uid: the image user imgUID's
// name, home and shell with uid and gid (so getpwuid, whoami and id name
// it, and getpwnam of the name finds it). nil when passwd has no such user.
func passwdWith(passwd []byte, imgUID string, uid int, gid string) []byte {
	sc := bufio.NewScanner(bytes.NewReader(passwd))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) != 7 || f[2] != imgUID {
			continue
		}
		f[2], f[3] = strconv.Itoa(uid), gid
		out := append([]byte(strings.Join(f, ":")+"\n"), passwd...)
		if len(passwd) > 0 && passwd[len(passwd)-1] != '\n' {
			out = append(out, '\n')
		}
		return out
	}
	return nil
}

// passwdMount bind-mounts a sandbox's passwd file, read-only, over the
// image's /etc/passwd.
func passwdMount(source string) mount.Mount {
	return mount.Mount{Type: mount.TypeBind, Source: source, Target: "/etc/passwd", ReadOnly: true}
}

// imagePasswd reads an image's /etc/passwd once (through a created, never
// started container) and keeps it.
func (b *Backend) imagePasswd(ctx context.Context, imageID string) ([]byte, error) {
	s := &b.uids
	s.mu.Lock()
	p, ok := s.passwd[imageID]
	s.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := b.readImageFile(ctx, imageID, "/etc/passwd")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.passwd == nil {
		s.passwd = make(map[string][]byte)
	}
	s.passwd[imageID] = p
	return p, nil
}

// readImageFile reads one file (at most 1 MiB) of an image: nil when it
// has none.
func (b *Backend) readImageFile(ctx context.Context, imageID, file string) ([]byte, error) {
	name := probeNamePrefix + strings.ToLower(rand.Text())[:12]
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.cli.ContainerRemove(rctx, name, container.RemoveOptions{Force: true})
	}()
	c, err := b.cli.ContainerCreate(ctx, &container.Config{Image: imageID, Cmd: []string{"true"},
		Labels: map[string]string{LabelWorker: b.cfg.WorkerID, LabelProbe: "true"}, NetworkDisabled: true},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		return nil, fmt.Errorf("dockerworker: create probe container: %w", err)
	}
	rc, _, err := b.cli.CopyFromContainer(ctx, c.ID, file)
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dockerworker: copy %s of image %s: %w", file, imageID, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("dockerworker: read %s of image %s: %w", file, imageID, err)
	}
	data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("dockerworker: read %s of image %s: %w", file, imageID, err)
	}
	return data, nil
}

// giveRoot gives a created container's writable root to its own uid
// (rootTar), before the start.
func (b *Backend) giveRoot(ctx context.Context, containerID string, own *ownedUser, passwdMounted bool) error {
	t, err := own.rootTar(passwdMounted)
	if err != nil || t == nil {
		return err
	}
	if err := b.cli.CopyToContainer(ctx, containerID, "/", bytes.NewReader(t), container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("dockerworker: give container %s's directories to its uid: %w", containerID, err)
	}
	return nil
}
