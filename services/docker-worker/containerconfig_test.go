package dockerworker

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestContainerConfigLimits: whatever the mode, every tmpfs and tmpfs
// volume has a size and an inode limit, the root is read-only where the
// quota is tmpfs, init is root for a non-root sandbox, and runsc gets its
// pids limit inside with host headroom.
func TestContainerConfigLimits(t *testing.T) {
	for _, mode := range []DiskQuota{DiskTmpfs, DiskStorageOpt, DiskNone} {
		for _, runtime := range []string{"", RuntimeRunsc} {
			b := &Backend{cfg: Config{WorkerID: "w1"}.withDefaults(), disk: mode, log: slog.New(slog.DiscardHandler)}
			sh := shape{image: "sandboxio/python:3.11", runtime: runtime, readOnly: mode == DiskNone,
				resources: events.Resources{CPUs: 1, MemoryMB: 512, PIDs: 64, DiskMB: 128}}
			facts := imageFacts{user: "1000:1000", workDir: "/work", home: "/home/sandbox"}
			cfg, hc := b.containerConfig(sh, facts, map[string]string{}, nil, true)
			name := string(mode) + "/" + runtime
			if cfg.User != "0:0" || cfg.Labels[LabelUser] != "1000:1000" {
				t.Errorf("%s: init user %q, label %q", name, cfg.User, cfg.Labels[LabelUser])
			}
			for target, opts := range hc.Tmpfs {
				if !strings.Contains(opts, "size=") {
					t.Errorf("%s: tmpfs %s without a size: %s", name, target, opts)
				}
			}
			for _, m := range hc.Mounts {
				if m.VolumeOptions == nil || m.VolumeOptions.DriverConfig == nil {
					if mode != DiskNone {
						t.Errorf("%s: volume %s without a quota", name, m.Target)
					}
					continue
				}
				o := m.VolumeOptions.DriverConfig.Options["o"]
				if !strings.Contains(o, "size=") || !strings.Contains(o, "nr_inodes=") || strings.Contains(o, "size=0m") {
					t.Errorf("%s: volume %s options %q", name, m.Target, o)
				}
			}
			if hc.ShmSize <= 0 {
				t.Errorf("%s: /dev/shm has no size", name)
			}
			switch mode {
			case DiskTmpfs:
				if !hc.ReadonlyRootfs || len(hc.Mounts) != 3 {
					t.Errorf("%s: read-only %t, mounts %+v", name, hc.ReadonlyRootfs, hc.Mounts)
				}
			case DiskStorageOpt:
				if hc.StorageOpt["size"] != "128M" {
					t.Errorf("%s: storage opt %v", name, hc.StorageOpt)
				}
			}
			if !strings.HasPrefix(hc.SecurityOpt[1], "seccomp={") {
				t.Errorf("%s: security opts %v", name, hc.SecurityOpt)
			}
			wantPids, nproc := int64(64), false
			if runtime == RuntimeRunsc {
				wantPids = 64*runscHostTasksPerProcess + runscPidsHeadroom
			}
			for _, u := range hc.Ulimits {
				if u.Name == "nproc" {
					nproc = u.Soft == 64 && u.Hard == 64
				}
			}
			if *hc.PidsLimit != wantPids || nproc != (runtime == RuntimeRunsc) {
				t.Errorf("%s: pids %d, nproc rlimit %t", name, *hc.PidsLimit, nproc)
			}
		}
	}
}

// TestAgentEntrypointProcs: the agent runs Go code on as many processors as
// the sandbox's CPU limit, rounded up, on either channel; without a limit the
// runtime decides. The runtime's own default is at least 2 (ADR 28).
func TestAgentEntrypointProcs(t *testing.T) {
	for _, tc := range []struct {
		cpus float64
		want string // --procs, "" for none
	}{{0.25, "1"}, {1, "1"}, {1.5, "2"}, {2, "2"}, {0, ""}} {
		for _, sock := range []bool{false, true} {
			b := &Backend{cfg: Config{WorkerID: "w1"}.withDefaults(), disk: DiskNone, log: slog.New(slog.DiscardHandler)}
			sh := shape{image: "sandboxio/base:latest", resources: events.Resources{CPUs: tc.cpus, MemoryMB: 512, PIDs: 64}}
			cfg, hc := b.containerConfig(sh, imageFacts{user: "1000:1000"}, map[string]string{}, nil, true)
			b.withAgent(cfg, hc)
			if sock {
				withAgentSock(cfg, hc, &agentSock{name: "s1", dir: t.TempDir()})
			}
			got := ""
			for i, a := range cfg.Entrypoint {
				if a == "--procs" && i+1 < len(cfg.Entrypoint) {
					got = cfg.Entrypoint[i+1]
				}
			}
			if got != tc.want || cfg.Entrypoint[0] != agentPath || cfg.Entrypoint[1] != "serve" {
				t.Errorf("cpus %g, socket %t: entrypoint %q, want --procs %q", tc.cpus, sock, cfg.Entrypoint, tc.want)
			}
			if sock && cfg.Entrypoint[len(cfg.Entrypoint)-2] != "--connect" {
				t.Errorf("cpus %g: socket entrypoint %q", tc.cpus, cfg.Entrypoint)
			}
		}
	}
}
