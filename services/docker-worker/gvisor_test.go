//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// needGVisor skips unless the daemon has runsc.
func needGVisor(t *testing.T, b *Backend) {
	t.Helper()
	if tier, ok := b.RuntimeTier(RuntimeRunsc); !ok || tier != events.TierGVisor {
		t.Skip("runsc is not registered with this docker daemon")
	}
}

func withGVisor() createOpt {
	return func(s *worker.CreateSpec) {
		s.Spec.Runtime = RuntimeRunsc
		s.Spec.RequireIsolation = events.TierGVisor
	}
}

// runErr runs p and returns its status and error (run fails the test on an error).
func runErr(t *testing.T, b *Backend, id string, p worker.Process, timeout time.Duration) (result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb strings.Builder
	p.Stdout, p.Stderr = &out, &errb
	st, err := b.Exec(ctx, id, p)
	return result{out.String(), errb.String(), st}, err
}

// TestGVisorForkBomb: the sandbox's process limit binds its processes,
// never the runtime that runs them. Under runsc every process of the
// sandbox costs the host about 10 tasks (the Sentry's thread for it, the
// ptrace platform's stub threads), so a host pids cgroup sized on the
// sandbox's limit killed runsc (exit code 2) at about 100 background
// sleeps with the default limit of 256. Now: many processes below the
// limit all run, forks past it fail with EAGAIN inside, a fork bomb is
// stopped at the limit, and the sandbox lives on and answers an exec.
func TestGVisorForkBomb(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	const forkFailed = "can't fork"
	for _, tc := range []struct {
		name     string
		pids     int // 0: the worker's default (256)
		script   string
		timeout  time.Duration
		wantOut  string // the script's stdout, when it ends on its own
		wantFail bool   // forks fail with EAGAIN
	}{
		{"150 sleeps under the default limit", 0,
			"for i in $(seq 150); do sleep 30 & done; n() { ps -o comm | grep -c '^sleep'; }; " +
				"for t in $(seq 100); do [ $(n) -ge 150 ] && break; sleep 0.1; done; n", 60 * time.Second, "150", false},
		{"150 sleeps past a limit of 64", 64,
			"for i in $(seq 150); do sleep 30 & done; wait", 60 * time.Second, "", true},
		{"fork bomb", 0, "b() { b & b & wait; }; b", 15 * time.Second, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := mustCreate(t, b, withGVisor(), withResources(events.Resources{PIDs: tc.pids, MemoryMB: 512}))
			start := time.Now()
			r, err := runErr(t, b, id, worker.Process{Cmd: []string{"sh", "-c", tc.script}}, tc.timeout)
			t.Logf("err %v, exit %d, %d fork failures, %s", err, r.status.Code, strings.Count(r.stderr, forkFailed), time.Since(start).Round(time.Millisecond))
			// The bomb's own exec may end at its timeout, or when the agent,
			// starved by the bomb's churn on a small machine, misses its
			// ping (later operations then go through Docker exec).
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, events.ErrAgentUnavailable) {
				t.Fatalf("the sandbox did not survive: %v", err)
			}
			if tc.wantOut != "" && strings.TrimSpace(r.stdout) != tc.wantOut {
				t.Errorf("stdout %q, want %q (stderr %q)", r.stdout, tc.wantOut, lastLine(r.stderr))
			}
			if got := strings.Contains(r.stderr, forkFailed); got != tc.wantFail {
				t.Errorf("fork failures %v, want %v (stderr %q)", got, tc.wantFail, lastLine(r.stderr))
			}
			// A bomb whose exec ended with its agent unreachable is not
			// killed by it; it unwinds as its forks fail, and Docker exec
			// gets EAGAIN from runsc meanwhile.
			eventually(t, 60*time.Second, "an exec answering after it", func() bool {
				r, err := runErr(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "echo alive"}}, 10*time.Second)
				return err == nil && strings.TrimSpace(r.stdout) == "alive"
			})
			if c, err := b.cli.ContainerInspect(context.Background(), b.lookupCached(id).containerID); err != nil || !c.State.Running {
				t.Fatalf("the container after it: %v", err)
			}
		})
	}
}

// TestGVisorHostTasksBounded: a gVisor sandbox at the most pids it may ask
// (runscMaxPIDs; more is refused: TestGVisorPIDsAboveCapRefused) gets
// runscMaxPIDs inside (its shell's ulimit -u) and a host pids limit of at
// most runscMaxHostTasks, and its runtime runs in the gVisor tier's cgroup,
// whose pids.max — the kernel's bound on the tier's host tasks together —
// is at most half of the host's task space. Before: a host limit of
// 164,352 (above this host's pid_max of 32,768) in no common cgroup.
func TestGVisorHostTasksBounded(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	id := mustCreate(t, b, withGVisor(), withResources(events.Resources{PIDs: runscMaxPIDs, MemoryMB: 256}))
	c, err := b.cli.ContainerInspect(context.Background(), b.lookupCached(id).containerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	t.Logf("pids %d: host pids limit %d, cgroup parent %q", runscMaxPIDs, *hc.PidsLimit, hc.CgroupParent)
	if hc.PidsLimit == nil || *hc.PidsLimit > runscMaxHostTasks || hc.CgroupParent != gvisorSlice {
		t.Errorf("host pids limit %d, cgroup parent %q: want at most %d in %s", *hc.PidsLimit, hc.CgroupParent, runscMaxHostTasks, gvisorSlice)
	}
	if got := sh(t, b, id, "ulimit -u"); got != strconv.Itoa(runscMaxPIDs) {
		t.Errorf("ulimit -u inside %q, want %d", got, runscMaxPIDs)
	}
	info, err := b.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := gvisorCgroupDir(info)
	if err != nil {
		t.Skipf("the tier's cgroup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, c.ID)); err != nil {
		t.Errorf("the runtime's cgroup is not under the tier's: %v", err)
	}
	pidMax, err1 := readProcInt("/proc/sys/kernel/pid_max")
	threads, err2 := readProcInt("/proc/sys/kernel/threads-max")
	limit, err3 := readProcInt(filepath.Join(dir, "pids.max"))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/pids.max %d; pid_max %d, threads-max %d", dir, limit, pidMax, threads)
	if limit > min(pidMax, threads)/2 {
		t.Errorf("the gVisor tier may take %d host tasks, more than half of %d", limit, min(pidMax, threads))
	}
}

// TestGVisorMemoryBomb: an allocation past the memory limit is reported as
// an OOM at once, never as a timeout.
func TestGVisorMemoryBomb(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	id := mustCreate(t, b, withGVisor(), withImage(pythonImage), withResources(events.Resources{MemoryMB: 128}))
	start := time.Now()
	r, err := runErr(t, b, id, worker.Process{Cmd: []string{"python3", "-c", "a = bytearray(1024 * 1024 * 1024); print(len(a))"}}, 60*time.Second)
	t.Logf("1 GiB in 128 MiB: status %+v, err %v, after %s", r.status, err, time.Since(start))
	switch {
	case err == nil:
		if !r.status.OOMKilled {
			t.Errorf("status %+v, want oom_killed", r.status)
		}
	case errors.Is(err, events.ErrSandboxOOMKilled):
	default:
		t.Errorf("err %v, want oom_killed or SandboxOOMKilled", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("OOM reported after %s", d)
	}
}

// TestGVisorProcessMemoryLimit: what can keep one process's allocation
// from taking the whole gVisor sandbox (the host's memory cgroup kills the
// Sentry, all of the sandbox's tasks at once; gVisor has no OOM killer of
// its own). RLIMIT_AS, which the Sentry enforces, does: the process gets
// ENOMEM (MemoryError) and the sandbox lives on. The Sentry's cgroupfs
// memory limit does not (accepted, not enforced). The worker does not set
// RLIMIT_AS itself: Docker's API has no such ulimit, and Go runtimes (the
// agent among them) do not start under an address-space limit below about
// 1 GiB (docs/backends/docker.md, "gVisor"); a caller limits its own process
// with `ulimit -v`, as here.
func TestGVisorProcessMemoryLimit(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	id := mustCreate(t, b, withGVisor(), withImage(pythonImage), withResources(events.Resources{MemoryMB: 256}))
	bomb := "python3 -c 'a = bytearray(1 << 30); print(len(a))'"
	r, err := runErr(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "ulimit -v 131072; " + bomb}}, 60*time.Second)
	t.Logf("1 GiB under ulimit -v 128 MiB in 256 MiB: status %+v, err %v, stderr %q", r.status, err, lastLine(r.stderr))
	if err != nil || r.status.Code == 0 || !strings.Contains(r.stderr, "MemoryError") {
		t.Errorf("allocation under RLIMIT_AS: status %+v, err %v, want MemoryError in the process", r.status, err)
	}
	if got := sh(t, b, id, "echo alive"); got != "alive" {
		t.Fatalf("sandbox after a process hit its address-space limit: %q", got)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestGVisorDaemons: setsid and nohup daemons plus an exec that times out
// leave the sandbox working.
func TestGVisorDaemons(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	id := mustCreate(t, b, withGVisor())
	for i := 0; i < 3; i++ {
		sh(t, b, id, "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & nohup sleep 1000 >/dev/null 2>&1 & (sleep 1000 &) ; echo started")
		// The worker's exec timeout is the exec's context running out: the
		// backend kills the process (and its group) then.
		start := time.Now()
		_, err := runErr(t, b, id, worker.Process{ID: "t" + strconv.Itoa(i), Cmd: []string{"sh", "-c", "setsid sleep 1000 & nohup sleep 1000 & sleep 30"}}, time.Second)
		if err == nil {
			t.Errorf("try %d: exec past its context returned no error", i)
		}
		t.Logf("try %d: timed out after %s: %v", i, time.Since(start).Round(time.Millisecond), err)
		if got := sh(t, b, id, "echo alive"); got != "alive" {
			t.Fatalf("try %d: after daemons and a timeout: %q", i, got)
		}
		// The timed-out exec's tree is gone, daemonised children included;
		// the daemons of the exec that ended normally live on.
		eventually(t, 10*time.Second, "timed-out tree killed", func() bool {
			return sh(t, b, id, "ps -o args | grep -c '^sleep 30$' || true") == "0"
		})
		// The newer runsc ends the process group of an exec with its leader,
		// so the nohup'd child (same group) may not outlive the setup exec;
		// the setsid and the subshell daemons do.
		if n, _ := strconv.Atoi(sh(t, b, id, "ps -o args | grep -c '^sleep 1000$' || true")); n < 2*(i+1) {
			t.Errorf("try %d: %d daemons alive, want at least %d", i, n, 2*(i+1))
		}
	}
}

// TestGVisorDeathNoticed: after an OOM took a gVisor sandbox, the next exec
// fails SandboxGone at once; a runsc that crashes under a running exec
// ends that exec with SandboxGone within seconds, not at its timeout.
func TestGVisorDeathNoticed(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	id := mustCreate(t, b, withGVisor(), withImage(pythonImage), withResources(events.Resources{MemoryMB: 128}))
	if _, err := runErr(t, b, id, worker.Process{Cmd: []string{"python3", "-c", "a = b'x' * (1 << 30)"}}, 60*time.Second); !errors.Is(err, events.ErrSandboxOOMKilled) {
		t.Fatalf("memory bomb: %v", err)
	}
	start := time.Now()
	if _, err := runErr(t, b, id, worker.Process{Cmd: []string{"true"}}, 60*time.Second); !errors.Is(err, events.ErrSandboxGone) {
		t.Errorf("exec after the OOM: %v, want SandboxGone", err)
	}
	t.Logf("exec into the dead sandbox refused after %s", time.Since(start))

	id2 := mustCreate(t, b, withGVisor())
	ins, err := b.cli.ContainerInspect(context.Background(), namePrefix+id2)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := runErr(t, b, id2, worker.Process{Cmd: []string{"sleep", "300"}}, 120*time.Second)
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond) // let the exec start; nothing to poll for from outside
	// The sandbox's runsc is the container's init on the host: kill it
	// (only this test's own container), as a Sentry crash would end.
	if ins.State == nil || ins.State.Pid <= 1 {
		t.Fatalf("container pid %+v", ins.State)
	}
	if err := syscall.Kill(ins.State.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill runsc (pid %d): %v", ins.State.Pid, err)
	}
	killed := time.Now()
	select {
	case err := <-errc:
		t.Logf("exec ended %s after runsc was killed: %v", time.Since(killed), err)
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Errorf("exec under a crashed runsc: %v, want SandboxGone", err)
		}
		if d := time.Since(killed); d > 5*time.Second {
			t.Errorf("noticed after %s", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec still running 30 s after runsc died")
	}
}

// TestGVisorDiskQuota: under runsc too, /work and /tmp stop at their size
// (host tmpfs volumes through the gofer) and the root is read-only.
func TestGVisorDiskQuota(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	needGVisor(t, b)
	if b.DiskQuotaMode() != DiskTmpfs {
		t.Skip("disk quota mode is not tmpfs here")
	}
	const quotaMB = 32
	id := mustCreate(t, b, withGVisor(), withResources(events.Resources{MemoryMB: 256, DiskMB: quotaMB}))
	for _, c := range []struct {
		target  string
		limitMB int64
	}{
		{"/work/fill", quotaMB},
		{"/tmp/fill", int64(b.cfg.TmpfsSizeMB)},
		{"/dev/shm/fill", int64(b.cfg.TmpfsSizeMB)},
		{"/var/tmp/fill", 0},
	} {
		r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c",
			"dd if=/dev/zero of=" + c.target + " bs=1M count=512 2>&1; stat -c %s " + c.target + " 2>/dev/null || echo 0; rm -f " + c.target}})
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		n := lines[len(lines)-1]
		t.Logf("gVisor: dd 512 MiB into %s: %s bytes (%s)", c.target, n, strings.Join(lines[:len(lines)-1], " | "))
		var got int64
		fmt.Sscan(n, &got)
		if got > c.limitMB<<20 {
			t.Errorf("%s: %d bytes written, limit %d MiB", c.target, got, c.limitMB)
		}
	}
}
