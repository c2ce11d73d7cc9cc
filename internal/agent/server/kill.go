package server

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// KillTree kills an exec's tree: its session and process group, everything
// below it, and every process carrying its mark (daemonised children that
// left the session). The tree is frozen with SIGSTOP until it stops growing,
// then killed, so that a fork loop cannot outrun it.
func KillTree(leader int, mark string) {
	self := os.Getpid()
	stopped := map[int]bool{}
	for round := 0; round < 20; round++ {
		grew := false
		for _, p := range treeOf(leader, mark, self) {
			if !stopped[p] {
				stopped[p], grew = true, true
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	_ = syscall.Kill(-leader, syscall.SIGKILL)
	_ = syscall.Kill(leader, syscall.SIGKILL)
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for round := 0; round < 20; round++ {
		tree := treeOf(leader, mark, self)
		if len(tree) == 0 {
			return
		}
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// KillMarked kills every process carrying the mark and returns how many.
func KillMarked(mark string) int {
	self := os.Getpid()
	n := 0
	for round := 0; round < 20; round++ {
		tree := treeOf(-1, mark, self)
		if len(tree) == 0 {
			break
		}
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		for _, p := range tree {
			if syscall.Kill(p, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

type procStat struct{ ppid, pgrp, session int }

func treeOf(leader int, mark string, self int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		if st, ok := readStat(pid); ok {
			all[pid] = st
		}
	}
	markBytes := []byte("\x00" + EnvMark + "=" + mark + "\x00")
	var out []int
	for pid, st := range all {
		member := leader > 0 && (pid == leader || st.session == leader || st.pgrp == leader)
		for p, n := st.ppid, 0; !member && leader > 0 && p > 1 && n < 64; n++ {
			if p == leader {
				member = true
			}
			p = all[p].ppid
		}
		if !member && mark != "" {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			member = bytes.Contains(append([]byte{0}, append(env, 0)...), markBytes)
		}
		if member {
			out = append(out, pid)
		}
	}
	return out
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return procStat{ppid: ppid, pgrp: pgrp, session: sess}, true
}

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
