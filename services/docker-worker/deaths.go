package dockerworker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"time"

	dockerevents "github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

var _ worker.DeathWatcher = (*Backend)(nil)

// OnSandboxDeath implements worker.DeathWatcher: handler is called when one
// of this worker's sandbox containers dies without a Kill (docker kill, PID
// 1 killed by the OOM killer, a runsc crash), as the daemon reports it.
func (b *Backend) OnSandboxDeath(handler func(sandboxID, reason string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onDeath = handler
}

// watchDeaths follows the daemon's container "die" events for this
// worker's containers until ctx ends, reconnecting with back-off when the
// stream breaks (a daemon restart).
func (b *Backend) watchDeaths(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		started := time.Now()
		err := b.followDeaths(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		b.log.Warn("docker events stream ended; following it again", "retry_in", backoff, slog.Any("err", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (b *Backend) followDeaths(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, errs := b.cli.Events(ctx, dockerevents.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(dockerevents.ContainerEventType)),
		filters.Arg("event", string(dockerevents.ActionDie)),
		filters.Arg("label", LabelWorker+"="+b.cfg.WorkerID))})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case m := <-msgs:
			b.containerDied(m)
		}
	}
}

// containerDied handles one die event: a sandbox container that this
// backend is not removing itself has died. A runsc container's death is
// judged first (deathStatus: inspects, and up to oomReportWait for the
// daemon's OOM report), on a goroutine of its own, so that one such death
// does not hold up the events of the others: a burst of gVisor OOMs was
// handled a second apart each.
func (b *Backend) containerDied(m dockerevents.Message) {
	id := sandboxIDFromNames([]string{m.Actor.Attributes["name"]})
	if id == "" {
		return // a pool member or a probe container, not a sandbox
	}
	b.mu.Lock()
	sb := b.sandboxes[id]
	b.mu.Unlock()
	if sb == nil {
		b.reportDeath(id, dieReason(m, nil, ""))
		return
	}
	if sb.gone.Load() || (sb.containerID != "" && sb.containerID != m.Actor.ID) {
		return // our own Kill, or an older container of the same name
	}
	select {
	case <-sb.died:
		return // reported already
	default:
	}
	if sb.runtime != RuntimeRunsc {
		sb.markDead()
		if !sb.hasAgent {
			b.reportDeath(id, dieReason(m, sb, ""))
			return
		}
		// The agent's crash report, if it wrote one, is read off its
		// attach stream (agentCrash, bounded) on a goroutine of its own.
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.reportDeath(id, dieReason(m, sb, agentCrash(sb)))
		}()
		return
	}
	if !sb.judging.CompareAndSwap(false, true) {
		return // an earlier event is judging it
	}
	// Judged before anything reacts to the death: the handler removes the
	// container, and an exec that learns of the death later must still be
	// told it was an OOM. Bounded by deathStatus's own timeouts; Close
	// waits for it.
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		st, err := b.deathStatus(sb)
		sb.death = &deathOutcome{st, err}
		sb.markDead()
		b.reportDeath(id, dieReason(m, sb, agentCrash(sb)))
	}()
}

// dieReason is what a die event says of the death. Under runc the agent,
// where the sandbox has one, is the container's main process (docker-init's
// only child, whose exit code docker-init passes on): the container died
// because the agent exited, and the reason says so. Under runsc the code
// may as well be runsc's own (its Sentry exits with 2 when it fails), so
// the reason stays the container's. crash is the first line of the
// agent's crash report (agentCrash), "" for none: the reason then starts
// with "agent crashed".
func dieReason(m dockerevents.Message, sb *sandbox, crash string) string {
	code := m.Actor.Attributes["exitCode"]
	reason := "container died"
	switch {
	case crash != "" && sb != nil && sb.runtime != RuntimeRunsc && code != "":
		reason = "agent crashed (code " + code + "): " + crash
	case crash != "" && code != "":
		reason = "agent crashed: " + crash + " (container exit code " + code + ")"
	case crash != "":
		reason = "agent crashed: " + crash
	case sb != nil && sb.hasAgent && sb.runtime != RuntimeRunsc && code != "":
		reason = "agent exited: code " + code
		if n, err := strconv.Atoi(code); err == nil && n > 128 && n < 128+65 {
			reason += " (signal " + unix.SignalName(syscall.Signal(n-128)) + ")"
		}
	case code != "":
		reason += " (exit code " + code + ")"
	}
	if strings.EqualFold(m.Actor.Attributes["oomKilled"], "true") {
		reason += ", killed by the OOM killer"
	}
	return reason
}

// reportDeath logs a death and hands it to the worker's handler.
func (b *Backend) reportDeath(id, reason string) {
	b.mu.Lock()
	handler := b.onDeath
	b.mu.Unlock()
	b.log.Warn("sandbox container died", "sandbox", id, "reason", reason)
	if handler != nil {
		handler(id, reason)
	}
}

// markDead records that the container died: execs waiting on it end.
func (sb *sandbox) markDead() {
	sb.diedOnce.Do(func() { close(sb.died) })
}

// deathOutcome is deathStatus's answer, kept.
type deathOutcome struct {
	st  worker.ExitStatus
	err error
}

// reportedDeath is what the daemon's report of the container's death was
// judged to be, if it has been reported and judged (runsc); nil otherwise.
func (sb *sandbox) reportedDeath() *deathOutcome {
	select {
	case <-sb.died:
		return sb.death
	default:
		return nil
	}
}

// deathOf is deathStatus, or what the death was judged to be when the
// daemon reported it (the container may be removed since).
func (b *Backend) deathOf(sb *sandbox) (worker.ExitStatus, error) {
	if d := sb.reportedDeath(); d != nil {
		return d.st, d.err
	}
	return b.deathStatus(sb)
}

// dieEventWait is how long an exec killed by a SIGKILL it did not send
// waits for the daemon's die event before it believes the container alive
// (the inspect right after can still say running while it dies).
const dieEventWait = 500 * time.Millisecond

// diesWithin reports whether the container's death is reported within d.
func (sb *sandbox) diesWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sb.died:
		return true
	case <-t.C:
		return false
	}
}
