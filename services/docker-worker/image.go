package dockerworker

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// imageFacts is what the backend learns once per image.
type imageFacts struct {
	id      string
	user    string // the user to run as
	workDir string
	home    string // the user's home directory, from the image's /etc/passwd
	warning string
}

// ensureImage returns the facts of ref, pulling it first when it is missing
// and the pull policy allows.
func (b *Backend) ensureImage(ctx context.Context, ref string) (imageFacts, error) {
	b.mu.Lock()
	f, ok := b.images[ref]
	b.mu.Unlock()
	if ok {
		return f, nil
	}
	ins, err := b.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		if perr := b.pull(ctx, ref); perr != nil {
			return imageFacts{}, fmt.Errorf("%w", events.Errorf(events.CodeImageNotFound,
				"image %s is not on this host and could not be pulled (%v); build it with deploy/images/build.sh or push it to a reachable registry",
				ref, perr).With("image", ref))
		}
		ins, err = b.cli.ImageInspect(ctx, ref)
	}
	if err != nil {
		return imageFacts{}, fmt.Errorf("dockerworker: inspect image %s: %w", ref, err)
	}
	f = imageFacts{id: ins.ID, workDir: b.cfg.WorkDir}
	imgUser := ""
	if ins.Config != nil {
		imgUser = ins.Config.User
		if ins.Config.WorkingDir != "" {
			f.workDir = ins.Config.WorkingDir
		}
	}
	users, err := b.imageUsers(ctx, ins.ID)
	_, has := users.find(uidOf(b.cfg.User))
	switch {
	case err != nil:
		b.log.Warn("read image passwd", "image", ref, slog.Any("err", err))
		f.user = b.cfg.User
	case has:
		f.user = b.cfg.User
	case imgUser != "" && imgUser != "root" && uidOf(imgUser) != "0":
		f.user = imgUser
		if e, ok := users.find(uidOf(imgUser)); ok {
			// Numeric, so that quota volumes can be given to it.
			f.user = e.uid + ":" + e.gid
		}
	default:
		f.user = ""
		f.warning = fmt.Sprintf("image %s has no user %s; the sandbox runs as root (still without capabilities)", ref, uidOf(b.cfg.User))
	}
	if e, ok := users.find(uidOf(f.user)); ok && f.user != "" {
		f.home = e.home
	}
	b.mu.Lock()
	b.images[ref] = f
	b.mu.Unlock()
	return f, nil
}

func uidOf(user string) string { u, _, _ := strings.Cut(user, ":"); return u }

// passwdEntry is one line of an image's /etc/passwd.
type passwdEntry struct{ name, uid, gid, home string }

type passwd []passwdEntry

// find looks a user up by number or name.
func (p passwd) find(user string) (passwdEntry, bool) {
	for _, e := range p {
		if e.uid == user || e.name == user {
			return e, true
		}
	}
	return passwdEntry{}, false
}

// imageUsers reads /etc/passwd of the image (through a created, never
// started container); an image without one has no users.
func (b *Backend) imageUsers(ctx context.Context, imageID string) (passwd, error) {
	// Named, so that it can be removed even when ctx ends while the daemon
	// is still creating it.
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
		return nil, fmt.Errorf("create probe container: %w", err)
	}
	rc, _, err := b.cli.CopyFromContainer(ctx, c.ID, "/etc/passwd")
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("copy /etc/passwd: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("read /etc/passwd: %w", err)
	}
	var out passwd
	sc := bufio.NewScanner(io.LimitReader(tr, 1<<20))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 5 {
			out = append(out, passwdEntry{name: fields[0], uid: fields[2], gid: fields[3], home: fields[5]})
		}
	}
	return out, sc.Err()
}

// pull tries one pull of ref, logging progress, bounded by PullTimeout.
func (b *Backend) pull(ctx context.Context, ref string) error {
	if b.cfg.Pull == PullNever {
		return errors.New("pulling is disabled")
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PullTimeout)
	defer cancel()
	b.log.Info("pulling image", "image", ref)
	worker.ReportProgress(ctx, "pulling image "+ref)
	start := time.Now()
	rc, err := b.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	last := time.Time{}
	for {
		var m struct {
			Status   string `json:"status"`
			ID       string `json:"id"`
			Progress string `json:"progress"`
			Error    string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("pull %s: %w", ref, err)
		}
		if m.Error != "" {
			return fmt.Errorf("pull %s: %s", ref, m.Error)
		}
		if time.Since(last) > time.Second {
			last = time.Now()
			b.log.Info("pull progress", "image", ref, "layer", m.ID, "status", m.Status, "progress", m.Progress)
			worker.ReportProgress(ctx, strings.TrimSpace(fmt.Sprintf("pulling image %s: %s %s %s", ref, m.ID, m.Status, m.Progress)))
		}
	}
	b.log.Info("image pulled", "image", ref, "duration_ms", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	worker.ReportProgress(ctx, fmt.Sprintf("pulled image %s in %s", ref, time.Since(start).Round(100*time.Millisecond)))
	return nil
}
