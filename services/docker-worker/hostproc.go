package dockerworker

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// hostSignalTree signals an exec's process tree from the host, when the
// daemon's pid namespace is the worker's (the worker runs as root on the
// daemon's host). It reports false when the pid is not visible here or is not
// in the container (a remote daemon, a worker in a container): the caller
// then signals from inside.
//
// An exec'd process is the leader of its own session and process group. A
// non-KILL signal goes to the group, as a terminal would send it. KILL goes
// to the group and then, in rounds until none is left, to every process of
// the container that is in the session or descends from the leader.
func hostSignalTree(containerID string, pid int, sig syscall.Signal) bool {
	if pid <= 1 || !inContainer(pid, containerID) {
		return false
	}
	if err := syscall.Kill(-pid, sig); err != nil && err != syscall.ESRCH {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			return false
		}
	}
	if sig != syscall.SIGKILL {
		return true
	}
	for round := 0; round < 20; round++ {
		tree := treeOf(pid, containerID)
		if len(tree) == 0 {
			return true
		}
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	return true
}

func inContainer(pid int, containerID string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && containerID != "" && bytes.Contains(b, []byte(containerID))
}

type procStat struct{ pid, ppid, pgrp, session int }

// treeOf lists the live processes of the container in leader's session or
// group or below leader.
func treeOf(leader int, containerID string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			all[pid] = st
		}
	}
	var out []int
	for pid, st := range all {
		member := st.session == leader || st.pgrp == leader || pid == leader
		for p, n := st.ppid, 0; !member && p > 1 && n < 64; n++ {
			if p == leader {
				member = true
			}
			p = all[p].ppid
		}
		if member && inContainer(pid, containerID) {
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
	if len(f) < 4 || f[0] == "Z" {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, session: sess}, true
}
