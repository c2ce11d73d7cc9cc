package dockerworker

import (
	"log/slog"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestGVisorPIDsBounded: a runsc sandbox's process limit (RLIMIT_NPROC,
// inside) is at most runscMaxPIDs whatever it asks, so its runtime's host
// pids limit is at most runscMaxHostTasks, and the runtime is made in the
// gVisor tier's cgroup; runc is untouched. Before: pids 4096 gave the
// runtime a host limit of 164,352 (more than this host's pid_max) and no
// parent cgroup.
func TestGVisorPIDsBounded(t *testing.T) {
	for _, tc := range []struct {
		runtime    string
		pids       int
		nproc      int64 // 0: no nproc rlimit
		host       int64
		cgroupRoot string
	}{
		{RuntimeRunsc, 64, 64, 64*runscHostTasksPerProcess + runscPidsHeadroom, gvisorSlice},
		{RuntimeRunsc, 256, 256, runscMaxHostTasks, gvisorSlice},
		{RuntimeRunsc, 4096, runscMaxPIDs, runscMaxHostTasks, gvisorSlice},
		{"", 4096, 0, 4096, ""},
	} {
		b := &Backend{cfg: Config{WorkerID: "w1"}.withDefaults(), disk: DiskNone, log: slog.New(slog.DiscardHandler)}
		sh := shape{image: "sandboxio/base:latest", runtime: tc.runtime, resources: events.Resources{CPUs: 1, MemoryMB: 512, PIDs: tc.pids}}
		_, hc := b.containerConfig(sh, imageFacts{user: "1000:1000"}, map[string]string{}, nil, true)
		var nproc int64
		for _, u := range hc.Ulimits {
			if u.Name == "nproc" && u.Soft == u.Hard {
				nproc = u.Soft
			}
		}
		if *hc.PidsLimit != tc.host || nproc != tc.nproc || hc.CgroupParent != tc.cgroupRoot {
			t.Errorf("%q pids %d: host pids %d, nproc %d, cgroup parent %q; want %d, %d, %q",
				tc.runtime, tc.pids, *hc.PidsLimit, nproc, hc.CgroupParent, tc.host, tc.nproc, tc.cgroupRoot)
		}
	}
}

// TestGVisorBudgetFitsHost: the gVisor tier's host tasks together (its
// cgroup's pids.max) take at most half of a host's task space, and on
// this host that still holds several sandboxes at their host limit and
// more fork bombs at the measured plateau (22 host tasks a process).
func TestGVisorBudgetFitsHost(t *testing.T) {
	for _, tc := range []struct{ pidMax, threadsMax, want int64 }{
		{32768, 192740, 16384},   // this machine
		{4194304, 192740, 96370}, // a large pid_max: threads-max binds
		{4194304, 4194304, 2097152},
	} {
		if got := gvisorBudget(tc.pidMax, tc.threadsMax); got != tc.want || got > min(tc.pidMax, tc.threadsMax)/2 {
			t.Errorf("gvisorBudget(%d, %d) = %d, want %d", tc.pidMax, tc.threadsMax, got, tc.want)
		}
	}
	pidMax, err := readProcInt("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	threads, err := readProcInt("/proc/sys/kernel/threads-max")
	if err != nil {
		t.Fatal(err)
	}
	budget := gvisorBudget(pidMax, threads)
	const bombPlateau = 22*runscMaxPIDs + 38
	t.Logf("pid_max %d, threads-max %d: budget %d = %d sandboxes at their host limit %d, %d fork bombs at %d",
		pidMax, threads, budget, budget/runscMaxHostTasks, runscMaxHostTasks, budget/bombPlateau, bombPlateau)
	if budget < runscMaxHostTasks {
		t.Errorf("budget %d below one sandbox's host limit %d", budget, runscMaxHostTasks)
	}
}
