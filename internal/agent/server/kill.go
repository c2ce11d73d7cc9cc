package server

import (
	"os"
	"strconv"
	"strings"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/proctree"
)

// agentScope keeps the agent itself and PID 1 (docker-init) out of every
// tree.
func agentScope() proctree.Scope { return proctree.Scope{Skip: []int{os.Getpid(), 1}} }

// KillTree kills an exec's tree: its session and process group, everything
// below it, and every process carrying its mark (proctree.Kill).
func KillTree(leader int, mark string) { proctree.Kill(leader, mark, agentScope()) }

// KillMarked kills every process carrying the mark and returns how many.
func KillMarked(mark string) int { return proctree.KillMarked(mark, agentScope()) }

// OOMKills reads the OOM kill counter of the cgroup the agent is in (v2
// memory.events, else v1 memory.oom_control).
func OOMKills() (int64, *proto.Error) {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
					return n, nil
				}
			}
		}
	}
	return 0, &proto.Error{Kind: proto.ErrNotFound, Message: "no cgroup OOM counter visible"}
}
