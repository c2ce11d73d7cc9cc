package dockerworker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// The janitor is the last line against leaks on a Docker host: a container
// past its own deadline must die whatever else is lost — its worker, the
// registry, the deployment (a dev restarted on a new data dir, a demo
// killed with SIGKILL). Every JanitorInterval (and once at start-up) it
// lists every container labelled io.sandboxio.worker on the daemon, of any
// worker, and removes
//
//   - a sandbox past its deadline by more than JanitorGrace: the deadline is
//     the one this backend holds in memory for its own sandboxes (set_timeout
//     moves it), else the one saved in the container's state tmpfs by
//     set_timeout or at a pool adoption (trusted only when the sandbox does
//     not run as root, who could rewrite it), else the io.sandboxio.deadline
//     label;
//   - a probe container (sbx-probe-*) older than ProbeMaxAge, and at
//     start-up every probe of this worker id (a crash mid-create left it);
//   - an idle pool member (sbx-pool-*) past its own deadline label (the
//     keeper replaces its members before it: PoolMemberTTL).
//
// A sweep removes at most JanitorBatch containers, each removal bounded by
// the kill timeout; every removal is logged and reported to the runtime
// (worker.Janitor), which records a "reap" operation and marks the sandbox
// gone where this deployment's registry knows it.

// probeNamePrefix names the short-lived containers that read an image's
// /etc/passwd (image.go).
const probeNamePrefix = "sbx-probe-"

// LabelProbe marks a probe container.
const LabelProbe = "io.sandboxio.probe"

// deadlineFile holds a sandbox's deadline when it differs from its label
// (set_timeout, a pool member adopted), in the root-only state tmpfs.
const deadlineFile = stateDir + "/deadline"

// sockDirGrace is how long an agent socket directory no container names is
// kept: one is made just before its container's create.
const sockDirGrace = 2 * time.Minute

// janitorSweepTimeout bounds one sweep.
const janitorSweepTimeout = 2 * time.Minute

var _ worker.Janitor = (*Backend)(nil)

// OnReap implements worker.Janitor.
func (b *Backend) OnReap(handler func(worker.Reaped)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onReap = handler
}

// runJanitor sweeps at once and then every JanitorInterval until ctx ends.
func (b *Backend) runJanitor(ctx context.Context) {
	t := time.NewTicker(b.cfg.JanitorInterval)
	defer t.Stop()
	for startup := true; ; startup = false {
		sctx, cancel := context.WithTimeout(ctx, janitorSweepTimeout)
		n, err := b.sweep(sctx, startup, time.Now())
		b.sweepEgress(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			b.log.Warn("janitor sweep", "removed", n, slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// janitorVerdict is what the janitor decided about one container.
type janitorVerdict struct {
	remove    bool
	sandboxID string
	deadline  time.Time
	reason    string
}

// sweep removes what must go and returns how many it removed.
func (b *Backend) sweep(ctx context.Context, startup bool, now time.Time) (int, error) {
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelWorker))})
	if err != nil {
		return 0, err
	}
	b.sweepSockDirs(list, sockDirGrace, now)
	removed := 0
	for _, c := range list {
		if removed >= b.cfg.JanitorBatch || ctx.Err() != nil {
			break // the rest waits for the next sweep
		}
		v := b.judge(ctx, c, startup, now)
		if !v.remove {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := b.removeContainer(rctx, c.ID)
		cancel()
		if err != nil {
			b.log.Warn("janitor: remove container", "container", c.ID, "sandbox", v.sandboxID, slog.Any("err", err))
			continue
		}
		removed++
		b.log.Info("janitor removed a container", "container", shortID(c.ID), "sandbox", v.sandboxID,
			"worker", c.Labels[LabelWorker], "reason", v.reason)
		if v.sandboxID == "" {
			continue
		}
		b.detachEgress(ctx, v.sandboxID)
		b.mu.Lock()
		delete(b.sandboxes, v.sandboxID)
		report := b.onReap
		b.mu.Unlock()
		if report != nil {
			report(worker.Reaped{SandboxID: v.sandboxID, WorkerID: c.Labels[LabelWorker], Deadline: v.deadline, Reason: v.reason})
		}
	}
	return removed, nil
}

// judge decides about one container.
func (b *Backend) judge(ctx context.Context, c container.Summary, startup bool, now time.Time) janitorVerdict {
	created := time.Unix(c.Created, 0)
	own := c.Labels[LabelWorker] == b.cfg.WorkerID
	switch {
	case hasNamePrefix(c.Names, probeNamePrefix) || c.Labels[LabelProbe] != "":
		// At start-up, this worker id's probes from before this process
		// are a crash's (the keeper may be probing already: not those).
		if (startup && own && created.Before(b.started.Truncate(time.Second))) || now.Sub(created) > b.cfg.ProbeMaxAge {
			return janitorVerdict{remove: true, reason: "probe container left behind"}
		}
		return janitorVerdict{}
	case hasPoolName(c.Names):
		if own && !startup {
			return janitorVerdict{} // the keeper's, which replaces it in time
		}
		if d, ok := labelTime(c.Labels, LabelDeadline); ok && now.After(d) {
			return janitorVerdict{remove: true, reason: "idle pool member past its lifetime"}
		}
		return janitorVerdict{}
	}
	id := sandboxIDFromNames(c.Names)
	if id == "" {
		return janitorVerdict{}
	}
	if sb := b.lookupCached(id); sb != nil && own {
		return janitorVerdict{} // the runtime kills it at its deadline, which it knows
	}
	deadline, ok := time.Time{}, false
	if c.Labels[LabelSandbox] == id {
		deadline, ok = labelTime(c.Labels, LabelDeadline)
	}
	if ok && now.Before(deadline.Add(b.cfg.JanitorGrace)) {
		return janitorVerdict{}
	}
	// Past the label (or an adopted pool member, which has none of its own):
	// set_timeout or the adoption may have saved a later one.
	if saved, found := b.savedDeadline(ctx, c); found {
		deadline, ok = saved, true
	} else if !ok {
		// An adopted pool member with nothing saved (a root sandbox): no
		// lifetime outlasts the longest from its creation.
		deadline, ok = created.Add(events.MaxLifetimeSeconds*time.Second), true
	}
	if !ok || now.Before(deadline.Add(b.cfg.JanitorGrace)) {
		return janitorVerdict{}
	}
	return janitorVerdict{remove: true, sandboxID: id, deadline: deadline,
		reason: "past its deadline " + deadline.UTC().Format(time.RFC3339)}
}

// savedDeadline reads the deadline saved in a running container's state
// tmpfs; it is not trusted from a sandbox that runs as root.
func (b *Backend) savedDeadline(ctx context.Context, c container.Summary) (time.Time, bool) {
	if c.State != "running" {
		return time.Time{}, false
	}
	sb := &sandbox{id: c.Labels[LabelSandbox], containerID: c.ID, procs: map[string]*process{}, died: make(chan struct{})}
	if b.runsAsRoot(ctx, sb) {
		return time.Time{}, false
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The worker's own static helper, never the image's cat: a container
	// without it has nothing saved, and goes by its label.
	var out bytes.Buffer
	if err := b.helper(rctx, sb, "0:0", []string{"files", "read", deadlineFile, "--max", "4096"}, nil,
		&limitedBuffer{b: &out, max: 4096}); err != nil {
		return time.Time{}, false
	}
	var saved struct {
		Deadline time.Time `json:"deadline"`
	}
	if json.Unmarshal(out.Bytes(), &saved) != nil || saved.Deadline.IsZero() {
		return time.Time{}, false
	}
	return saved.Deadline, true
}

// saveDeadline writes the sandbox's deadline into its state tmpfs, in the
// background (the janitor reads it; execs and kills use the memory copy).
func (b *Backend) saveDeadline(sb *sandbox, deadline time.Time) {
	data, err := json.Marshal(struct {
		Deadline time.Time `json:"deadline"`
	}{deadline.UTC()})
	if err != nil {
		return
	}
	if !sb.hasAgent {
		// Never the image's shell as root: without the static
		// helper in the container the deadline stays in this worker's
		// memory, and another deployment's janitor goes by the label.
		b.log.Warn("sandbox deadline not saved (no agent binary in the container): the janitor goes by its label", "sandbox", sb.id)
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Saved on a goroutine the backend waits for, after the call that set it answered: its own bound.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The worker's own static helper, as root, with none of the
		// sandbox's environment: never the image's shell or cat.
		if err := b.helper(ctx, sb, "0:0", []string{"files", "write", deadlineFile, "--mode", "600",
			"--size", strconv.Itoa(len(data))}, bytes.NewReader(data), nil); err != nil {
			b.log.Warn("sandbox deadline not saved: the janitor goes by its label", "sandbox", sb.id, slog.Any("err", err))
		}
	}()
}

var _ worker.TimeoutSetter = (*Backend)(nil)

// SetTimeout implements worker.TimeoutSetter: the sandbox's new deadline,
// kept in memory and saved in the container for the janitor (Docker labels
// cannot change).
func (b *Backend) SetTimeout(ctx context.Context, sandboxID string, deadline time.Time) error {
	sb, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.deadline = deadline
	sb.mu.Unlock()
	b.saveDeadline(sb, deadline)
	return nil
}

func labelTime(labels map[string]string, key string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, labels[key])
	return t, err == nil
}

func hasNamePrefix(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(strings.TrimPrefix(n, "/"), prefix) {
			return true
		}
	}
	return false
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// currentDeadline is the sandbox's deadline as this backend knows it.
func (sb *sandbox) currentDeadline() time.Time {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.deadline
}
