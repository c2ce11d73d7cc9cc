// Package proctree finds and kills an exec's process tree through /proc: the
// leader's session and process group, everything descended from it, and
// every process whose environment carries the exec's mark (SBX_PROCESS_ID=id,
// which catches daemonised children that left the session and were
// reparented). Both the in-sandbox agent (inside the container's pid
// namespace) and the docker worker (from the host, limited to the
// container's processes) use it.
//
// Every process a walk finds is signalled through a pidfd (pidfd_open,
// pidfd_send_signal), opened after the walk and checked against the
// process's start time, so that a process that exited after the walk and
// whose pid another process took is never signalled. Where the kernel has
// no pidfds (before 5.3, or a gVisor without them), or no descriptor can be
// opened for a member (EMFILE, ENFILE, ENOMEM: it is not taken as gone),
// that process is signalled by pid, only while the pid still names a
// process with the start time the walk saw.
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

type stat struct {
	ppid, pgrp, session int
	start               uint64 // start time in clock ticks after boot
}

// Tree lists the live members of the tree of leader (0 or less: none but
// the marked) and mark ("" for none).
func Tree(leader int, mark string, sc Scope) []int {
	members := walk(leader, mark, sc)
	out := make([]int, 0, len(members))
	for _, f := range members {
		out = append(out, f.pid)
	}
	return out
}

// found is a process a walk found, with its start time.
type found struct {
	pid   int
	start uint64
}

// walkTree is walk; a test replaces it with a walk that saw a process
// which has since exited and whose pid another process took.
var walkTree = walk

// walk lists the live members of the tree, as Tree.
func walk(leader int, mark string, sc Scope) []found {
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
	var out []found
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
			out = append(out, found{pid: pid, start: st.start})
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
// stops growing, then killed, so that a fork loop cannot outrun it. Each
// process is signalled through its pidfd (see the package doc).
func Kill(leader int, mark string, sc Scope) {
	var ps procs
	defer ps.close()
	for round := 0; round < 20; round++ {
		if len(ps.pin(walkTree(leader, mark, sc), syscall.SIGSTOP)) == 0 {
			break
		}
	}
	// The group of the leader, while the leader is the process the walk
	// found: no other process can then own a group of that id.
	if l := ps.m[leader]; leader > 0 && l != nil && l.signal(0) == nil {
		_ = syscall.Kill(-leader, syscall.SIGKILL)
	}
	for _, p := range ps.m {
		_ = p.signal(syscall.SIGKILL)
	}
	for round := 0; round < 20; round++ {
		tree := walkTree(leader, mark, sc)
		if len(tree) == 0 {
			return
		}
		ps.pin(tree, 0)
		for _, f := range tree {
			if p := ps.m[f.pid]; p != nil && p.start == f.start {
				_ = p.signal(syscall.SIGKILL)
			}
		}
	}
}

// KillMarked kills every process carrying the mark and returns how many.
func KillMarked(mark string, sc Scope) int {
	var ps procs
	defer ps.close()
	n := 0
	for round := 0; round < 20; round++ {
		tree := walkTree(-1, mark, sc)
		if len(tree) == 0 {
			break
		}
		ps.pin(tree, syscall.SIGSTOP)
		for _, f := range tree {
			if p := ps.m[f.pid]; p != nil && p.start == f.start && p.signal(syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

func readStat(pid int) (stat, bool) {
	st, alive, _ := readStatKnown(pid)
	return st, alive
}

// readStatKnown is readStat, and whether the answer is known: false when
// /proc could not be read for another reason than the process being gone
// (EMFILE, ENFILE, ENOMEM: the reader is out of file descriptors).
func readStatKnown(pid int) (st stat, alive, known bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false, !outOfDescriptors(err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false, true
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return stat{}, false, true
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	var start uint64
	if len(f) > 19 { // field 22, starttime
		start, _ = strconv.ParseUint(f[19], 10, 64)
	}
	return stat{ppid: ppid, pgrp: pgrp, session: sess, start: start}, true, true
}
