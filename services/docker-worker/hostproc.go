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
// non-KILL signal goes to the group, as a terminal would send it. For KILL,
// the tree is every process of the container that is in the leader's session
// or group, descends from it, or carries its mark (EnvProcessID=id) in its
// environment (which catches daemonised children, reparented to init): the
// tree is frozen with SIGSTOP until no new member appears, then killed.
func hostSignalTree(containerID string, pid int, sig syscall.Signal, mark string) bool {
	if pid <= 1 || !inContainer(pid, containerID) {
		return false
	}
	if sig != syscall.SIGKILL {
		if err := syscall.Kill(-pid, sig); err != nil && err != syscall.ESRCH {
			if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
				return false
			}
		}
		return true
	}
	// Without the right to signal the leader (a worker not running as root,
	// or as another uid than the sandbox's) nothing here would work: say
	// so, and let the caller kill from inside the container.
	if err := syscall.Kill(pid, 0); err == syscall.EPERM {
		return false
	}
	stopped := map[int]bool{}
	for round := 0; round < 20; round++ {
		grew := false
		for _, p := range treeOf(pid, containerID, mark) {
			if !stopped[p] {
				stopped[p], grew = true, true
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for round := 0; round < 20; round++ {
		tree := treeOf(pid, containerID, mark)
		if len(tree) == 0 {
			break
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
// group, below leader, or with mark in their environment.
func treeOf(leader int, containerID, mark string) []int {
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
		if !inContainer(pid, containerID) {
			continue
		}
		if !member && mark != "" {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			member = bytes.Contains(append([]byte{0}, env...), []byte("\x00"+mark+"\x00"))
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
	if len(f) < 4 || f[0] == "Z" {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sess, _ := strconv.Atoi(f[3])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, session: sess}, true
}
