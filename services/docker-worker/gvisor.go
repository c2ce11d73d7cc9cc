package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/go-units"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Under runsc the sandbox's processes are not host processes: they are
// tasks of the Sentry, and what the host's pids cgroup counts is the
// runtime's own threads. Those grow with the sandbox's processes — on the
// ptrace platform (Debian's runsc) a Sentry thread for each task and stub
// threads for each address space: about 8 host tasks for each sleeping
// process (250 sleeps: 1,952), 20 to 22 at the plateau of a fork bomb held
// at 256 (5,124 and 5,481; at 64: 995), 38 for an idle sandbox (measured
// on 2 CPUs, pids.current of the container's cgroup). A host limit sized
// on the sandbox's limit killed runsc (its Go runtime exits with 2 when it
// cannot make a thread) at about 100 processes. So the sandbox's limit is
// enforced inside, by the Sentry, as RLIMIT_NPROC (its own process table:
// the limit is the sandbox's alone; under runc the same rlimit would count
// every process of the host uid, and is not set), and the host's pids
// cgroup is only a backstop for the runtime, sized to what runsc needs at
// that limit.
//
// The host tasks of all gVisor sandboxes together are bounded by the
// kernel: every runsc container is made in one parent cgroup, gvisorSlice,
// whose pids.max is half of the host's pid space (setupGVisorBudget), so
// that however many hardened sandboxes run fork bombs, dockerd, the worker
// and runc sandboxes keep the other half (ADR 47).
const (
	// runscMaxPIDs is the most processes a gVisor sandbox may have: a
	// class or request asking more is refused (checkRunscPIDs), a worker
	// default above it is clamped to it. At 512 a fork bomb took 9,916 host
	// tasks and the sandbox's 512 MiB (the Sentry was OOM-killed).
	runscMaxPIDs = 256
	// runscHostTasksPerProcess is the host tasks allowed for each process
	// the sandbox may have: half again the 22 measured at a fork bomb's
	// plateau.
	runscHostTasksPerProcess = 32
	// runscPidsHeadroom is the host tasks of an idle runsc (38: the
	// Sentry, the gofer) and then some.
	runscPidsHeadroom = 256
	// runscMaxHostTasks is one gVisor sandbox's host pids limit at most.
	runscMaxHostTasks = runscMaxPIDs*runscHostTasksPerProcess + runscPidsHeadroom
	// gvisorSlice is the parent cgroup of every runsc container, whose
	// pids.max bounds their host tasks together. A name of this form is a
	// directory under the cgroupfs driver and a slice under systemd's.
	gvisorSlice = "sandboxio-gvisor.slice"
)

// applyGVisorLimits moves the pids limit inside a runsc sandbox and puts
// its runtime in the gVisor tier's cgroup.
func applyGVisorLimits(hc *container.HostConfig, r events.Resources) {
	inside, host := runscPIDs(r.PIDs)
	hc.PidsLimit = &host
	hc.CgroupParent = gvisorSlice
	hc.Ulimits = append(hc.Ulimits, &units.Ulimit{Name: "nproc", Soft: inside, Hard: inside})
}

// checkRunscPIDs refuses a class or request (request over class) that
// asks a gVisor sandbox for more than runscMaxPIDs processes, with
// SBX_E1007 naming resources.pids. The worker's own default above it is
// clamped (runscPIDs): an operator's setting, not a caller's ask.
func checkRunscPIDs(layers ...*events.Resources) error {
	asked := 0
	for _, l := range layers {
		if l != nil && l.PIDs > 0 {
			asked = l.PIDs
		}
	}
	if asked > runscMaxPIDs {
		return events.Errorf(events.CodeInvalidValue, "pids %d exceeds the gVisor runtime's maximum %d", asked, runscMaxPIDs).
			With("field", "resources.pids").With("limit", runscMaxPIDs)
	}
	return nil
}

// runscPIDs is a gVisor sandbox's process limit (its RLIMIT_NPROC, at most
// runscMaxPIDs) and the host pids limit of its runtime.
func runscPIDs(pids int) (inside, host int64) {
	inside = int64(min(max(pids, 1), runscMaxPIDs))
	return inside, inside*runscHostTasksPerProcess + runscPidsHeadroom
}

// gvisorBudget is the host tasks the gVisor tier may take together: half
// of the host's task space (the smaller of kernel.pid_max and
// kernel.threads-max), so that the other half stays with the rest of the
// host whatever the tier does.
func gvisorBudget(pidMax, threadsMax int64) int64 { return min(pidMax, threadsMax) / 2 }

// setupGVisorBudget sets the pids.max of the gVisor tier's cgroup to the
// budget, at start, and logs the figures. Where it cannot (the systemd
// cgroup driver, no write access to the host's cgroupfs) it says so at
// warning level: the tier is then bounded only sandbox by sandbox.
func setupGVisorBudget(log *slog.Logger, info system.Info) {
	pidMax, err := readProcInt("/proc/sys/kernel/pid_max")
	threads, err2 := readProcInt("/proc/sys/kernel/threads-max")
	if err = errors.Join(err, err2); err != nil {
		log.Warn("gvisor host task budget not set", "err", err)
		return
	}
	budget := gvisorBudget(pidMax, threads)
	figures := []any{"pid_max", pidMax, "threads_max", threads, "budget", budget,
		"per_sandbox_max", runscMaxHostTasks, "max_pids", runscMaxPIDs}
	dir, err := gvisorCgroupDir(info)
	if err == nil {
		budget, err = limitPids(dir, budget)
	}
	if err != nil {
		log.Warn("gvisor host task budget not set: the gVisor tier's host tasks are bounded only per sandbox",
			append(figures, "cgroup", gvisorSlice, "err", err)...)
		return
	}
	log.Info("gvisor host task budget", append(figures, "cgroup", dir, "pids_max", budget)...)
	if budget < runscMaxHostTasks {
		log.Warn("gvisor host task budget is below one sandbox's host pids limit", "pids_max", budget, "per_sandbox_max", runscMaxHostTasks)
	}
}

// gvisorCgroupDir is the gVisor tier's pids cgroup under the cgroupfs
// driver, where the daemon makes containers under that directory.
func gvisorCgroupDir(info system.Info) (string, error) {
	if info.CgroupDriver != "cgroupfs" {
		return "", fmt.Errorf("cgroup driver %q: set TasksMax on %s instead", info.CgroupDriver, gvisorSlice)
	}
	if info.CgroupVersion == "2" {
		return filepath.Join("/sys/fs/cgroup", gvisorSlice), nil
	}
	return filepath.Join("/sys/fs/cgroup/pids", gvisorSlice), nil
}

// limitPids makes the cgroup dir and sets its pids.max to limit, unless it
// has a lower one already (an operator's); it returns the limit in force.
func limitPids(dir string, limit int64) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	file := filepath.Join(dir, "pids.max")
	if cur, err := readProcInt(file); err == nil && cur <= limit {
		return cur, nil
	}
	if err := os.WriteFile(file, []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return 0, fmt.Errorf("set %s: %w", file, err)
	}
	return limit, nil
}

// readProcInt reads a file holding one integer (a sysctl, a cgroup limit;
// "max" is an error).
func readProcInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
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
	// Asked after the exec's own context may have ended with the sandbox: its own bound.
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
