package modalfake

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxio/sandboxio/internal/fakejail"
)

// A Modal sandbox is a container: terminating it ends every process in it,
// whatever its process group or session. The fake runs a sandbox's execs as
// host processes, so it finds them in /proc: the members of every exec's
// process group or session and their descendants, and any process whose
// root (in a jail) or working directory (without one) is the sandbox's
// directory. The last rule catches a setsid child whose parent is gone.

// procStat is what /proc/<pid>/stat says of a process.
type procStat struct{ pid, ppid, pgrp, sid int }

// readStat parses /proc/<pid>/stat (the command name may hold spaces and
// parentheses: the fields follow the last ')').
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp session ...
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return procStat{}, false // a zombie holds nothing
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sid, _ := strconv.Atoi(f[3])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid}, true
}

// hostProcs lists the live processes of the host (the fake shares its pid
// namespace with them).
func hostProcs() []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// inRoot reports whether a process lives in the sandbox's directory.
func inRoot(pid int, root string) bool {
	link := "root"
	if fakejail.HostView(DetectJail()) {
		link = "cwd"
	}
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/" + link)
	if err != nil {
		return false
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// members lists the pids of the sandbox's live processes.
func (sb *sandbox) members() []int {
	seeds := map[int]bool{}
	for _, p := range sb.allProcs() {
		p.mu.Lock()
		if p.pgid > 0 && !p.exited {
			// Only while the leader is not reaped: a group number can be
			// reused once the group is empty. Members left behind by a
			// reaped leader are found by their root or directory.
			seeds[p.pgid] = true
		}
		p.mu.Unlock()
	}
	self := os.Getpid()
	all := hostProcs()
	in := map[int]bool{}
	for _, st := range all {
		if st.pid != self && st.pid != 1 && (seeds[st.pgrp] || seeds[st.sid] || inRoot(st.pid, sb.root)) {
			in[st.pid] = true
		}
	}
	for grew := true; grew; { // descendants, to a fixed point
		grew = false
		for _, st := range all {
			if !in[st.pid] && in[st.ppid] && st.pid != self {
				in[st.pid], grew = true, true
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	return out
}

// killAll sends SIGKILL to every process of the sandbox and reports how
// many it found.
func (sb *sandbox) killAll() int {
	pids := sb.members()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}
