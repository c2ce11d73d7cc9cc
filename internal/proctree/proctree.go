// Package proctree finds and kills an exec's process tree through /proc: the
// leader's session and process group, everything descended from it, and
// every process whose environment carries the exec's mark (SBX_PROCESS_ID=id,
// which catches daemonised children that left the session and were
// reparented). Both the in-sandbox agent (inside the container's pid
// namespace) and the docker worker (from the host, limited to the
// container's processes) use it.
package proctree

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// EnvMark is the variable that marks an exec's process tree.
const EnvMark = "SBX_PROCESS_ID"

// Scope limits a walk: Keep, when set, says whether a process may be a
// member (the host's walk keeps the container's processes only); Skip
// processes are never members (the agent itself, PID 1).
type Scope struct {
	Keep func(pid int) bool
	Skip []int
}

type stat struct{ ppid, pgrp, session int }

// Tree lists the live members of the tree of leader (0 or less: none but
// the marked) and mark ("" for none).
func Tree(leader int, mark string, sc Scope) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := map[int]stat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			all[pid] = st
		}
	}
	markBytes := []byte("\x00" + EnvMark + "=" + mark + "\x00")
	var out []int
	for pid, st := range all {
		if skipped(pid, sc.Skip) {
			continue
		}
		member := leader > 0 && (pid == leader || st.session == leader || st.pgrp == leader)
		for p, n := st.ppid, 0; !member && leader > 0 && p > 1 && n < 64; n++ {
			if p == leader {
				member = true
			}
			p = all[p].ppid
		}
		if sc.Keep != nil && !sc.Keep(pid) {
			continue
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

func skipped(pid int, skip []int) bool {
	for _, s := range skip {
		if pid == s {
			return true
		}
	}
	return false
}

// Kill kills the tree of leader and mark. It is frozen with SIGSTOP until it
// stops growing, then killed, so that a fork loop cannot outrun it.
func Kill(leader int, mark string, sc Scope) {
	stopped := map[int]bool{}
	for round := 0; round < 20; round++ {
		grew := false
		for _, p := range Tree(leader, mark, sc) {
			if !stopped[p] {
				stopped[p], grew = true, true
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	if leader > 0 {
		_ = syscall.Kill(-leader, syscall.SIGKILL)
		_ = syscall.Kill(leader, syscall.SIGKILL)
	}
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for round := 0; round < 20; round++ {
		tree := Tree(leader, mark, sc)
		if len(tree) == 0 {
			return
		}
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// KillMarked kills every process carrying the mark and returns how many.
func KillMarked(mark string, sc Scope) int {
	n := 0
	for round := 0; round < 20; round++ {
		tree := Tree(-1, mark, sc)
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

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return stat{ppid: ppid, pgrp: pgrp, session: sess}, true
}
