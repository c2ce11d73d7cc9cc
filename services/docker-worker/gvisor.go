package dockerworker

import (
	"context"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Under runsc the sandbox's processes are not host processes: they are
// tasks of the Sentry, and what the host's pids cgroup counts is the
// runtime's own threads. Those grow with the sandbox's processes — on the
// ptrace platform (Debian's runsc) a Sentry thread for each task and stub
// threads for each address space: about 10 host tasks for each sleeping
// process, 26 at the peak of a fork bomb held at 256 (measured on 2 CPUs).
// A host limit sized on the sandbox's limit killed runsc (its Go runtime
// exits with 2 when it cannot make a thread) at about 100 processes. So
// the sandbox's limit is enforced inside, by the Sentry, as RLIMIT_NPROC
// (its own process table: the limit is the sandbox's alone; under runc the
// same rlimit would count every process of the host uid, and is not set),
// and the host's pids cgroup is only a backstop for the runtime, sized to
// what runsc needs at that limit.
const (
	// runscHostTasksPerProcess is the host tasks allowed for each process
	// the sandbox may have: above the 26 measured at a fork bomb's peak.
	runscHostTasksPerProcess = 40
	// runscPidsHeadroom is the host tasks of an idle runsc (about 90:
	// the Sentry, the gofer) and then some.
	runscPidsHeadroom = 512
)

// applyGVisorLimits moves the pids limit inside a runsc sandbox.
func applyGVisorLimits(hc *container.HostConfig, r events.Resources) {
	host := int64(r.PIDs)*runscHostTasksPerProcess + runscPidsHeadroom
	hc.PidsLimit = &host
	n := int64(r.PIDs)
	hc.Ulimits = append(hc.Ulimits, &units.Ulimit{Name: "nproc", Soft: n, Hard: n})
}

// deathWatch returns a channel that is closed when a runsc sandbox's
// container stops while an exec runs in it, and a func that stops watching
// and waits for the watcher to end.
// runc needs none: its execs die with the container and their streams end.
func (b *Backend) deathWatch(ctx context.Context, sb *sandbox) (<-chan struct{}, func()) {
	if sb.runtime != RuntimeRunsc {
		return nil, func() {}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	died := make(chan struct{})
	resp, errs := b.cli.ContainerWait(wctx, sb.containerID, container.WaitConditionNotRunning)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-resp:
			close(died)
		case err := <-errs:
			if wctx.Err() == nil && err != nil {
				// Gone already (404), or the daemon lost the wait: look.
				ictx, icancel := context.WithTimeout(wctx, 10*time.Second)
				if !b.running(ictx, sb) && wctx.Err() == nil {
					close(died)
				}
				icancel()
			}
		case <-wctx.Done():
		}
	}()
	return died, func() { cancel(); <-exited }
}

// deathStatus is the outcome of an exec whose sandbox died under it: an
// OOM (the runtime's cgroup killed it) or a crash, SandboxGone.
func (b *Backend) deathStatus(sb *sandbox) (worker.ExitStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := worker.ExitStatus{Code: 137, Signal: "KILL"}
	c, err := b.cli.ContainerInspect(ctx, sb.containerID)
	// The daemon learns of an OOM from its own event, which may come a
	// moment after the one that says the container exited: a runtime
	// killed by SIGKILL is looked at again, for up to oomReportWait,
	// before it is called a crash.
	for deadline := time.Now().Add(oomReportWait); err == nil && killedNotOOM(c) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
		c, err = b.cli.ContainerInspect(ctx, sb.containerID)
	}
	if err == nil && c.State != nil && c.State.OOMKilled {
		st.OOMKilled = true
		return st, events.Errorf(events.CodeSandboxOOMKilled, "sandbox %s ran out of memory and its runtime was killed", sb.id).
			With("oom_killed", true).With("sandbox_id", sb.id)
	}
	state := "removed"
	if err == nil && c.State != nil {
		state = c.State.Status
		b.log.Warn("sandbox runtime died", "sandbox", sb.id, "exit_code", c.State.ExitCode, "error", c.State.Error)
	}
	return st, events.Errorf(events.CodeSandboxGone, "sandbox %s died while the process ran (container %s)", sb.id, state).
		With("sandbox_id", sb.id)
}

// oomReportWait bounds how long deathStatus waits for the daemon to say
// that a runtime killed by SIGKILL was killed for memory.
const oomReportWait = time.Second

// killedNotOOM: the container exited by SIGKILL, and no OOM is known (yet).
func killedNotOOM(c container.InspectResponse) bool {
	return c.State != nil && !c.State.Running && !c.State.OOMKilled && c.State.ExitCode == 137
}

// diedUnder reports whether a runsc sandbox died under an exec that ended
// with code. Newer runsc ends such an exec with 128, its own failure,
// rather than hanging, sometimes a moment before the daemon sees the
// container stop: after a 128 the container is given runscDeathWait to
// stop; after another code of 128 or more it is looked at once.
func (b *Backend) diedUnder(ctx context.Context, sb *sandbox, code int) bool {
	if sb.runtime != RuntimeRunsc || code < 128 || sb.gone.Load() {
		return false
	}
	if code != 128 {
		return !b.running(ctx, sb)
	}
	deadline := time.Now().Add(runscDeathWait)
	for {
		if !b.running(ctx, sb) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runscDeathWait bounds how long an exec that runsc failed (code 128)
// waits to see whether the sandbox is dying.
const runscDeathWait = 3 * time.Second
