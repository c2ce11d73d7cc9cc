// Command seccompgen writes the docker backend's seccomp profile
// (services/docker-worker/seccomp.json): Docker's default profile, read from
// the moby/profiles module (Apache-2.0), with the system calls a sandbox does
// not need taken out of every allow rule and denied by an explicit rule.
//
//	go mod download github.com/moby/profiles/seccomp@v0.1.0
//	go run ./services/docker-worker/internal/seccompgen \
//	    -src "$(go env GOMODCACHE)/github.com/moby/profiles/seccomp@v0.1.0/default.json" \
//	    -out services/docker-worker/seccomp.json
//
// The list of denied calls is Denied below; docs/security.md explains each.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
)

// Denied are the calls the sandbox profile refuses with EPERM, on top of
// what Docker's default already refuses.
var Denied = []string{
	// io_uring: a second system-call interface that seccomp cannot filter.
	"io_uring_enter", "io_uring_register", "io_uring_setup",
	// Tracing and reading other processes' memory (PID 1 included).
	"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace",
	// Kernel loading, eBPF, perf, userfaultfd (a classic exploit primitive).
	"bpf", "kexec_file_load", "kexec_load", "perf_event_open", "userfaultfd",
	// The kernel keyring.
	"add_key", "keyctl", "request_key",
	// Namespaces and mounts, whatever capabilities a caller might hold.
	"fsconfig", "fsmount", "fsopen", "fspick", "mount", "mount_setattr", "move_mount",
	"open_tree", "setns", "umount", "umount2", "unshare",
	// Obsolete or host-wide.
	"acct", "lookup_dcookie", "quotactl", "quotactl_fd", "swapoff", "swapon",
	"syslog", "uselib", "vhangup",
}

// profile is the part of the OCI/Docker seccomp JSON this program edits; the
// rest is carried through as raw JSON.
type profile struct {
	DefaultAction   string            `json:"defaultAction"`
	DefaultErrnoRet *int              `json:"defaultErrnoRet,omitempty"`
	ArchMap         json.RawMessage   `json:"archMap,omitempty"`
	Syscalls        []json.RawMessage `json:"syscalls"`
}

type rule struct {
	Names []string `json:"names"`
}

func main() {
	src := flag.String("src", "", "Docker's default.json")
	out := flag.String("out", "", "where to write the profile")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "seccompgen:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	b, err := generate(raw)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

func generate(raw []byte) ([]byte, error) {
	var p profile
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("parse profile: %w", err)
	}
	var kept []json.RawMessage
	for _, r := range p.Syscalls {
		var full map[string]any
		if err := json.Unmarshal(r, &full); err != nil {
			return nil, err
		}
		var names rule
		if err := json.Unmarshal(r, &names); err != nil {
			return nil, err
		}
		left := slices.DeleteFunc(slices.Clone(names.Names), func(n string) bool { return slices.Contains(Denied, n) })
		if len(left) == 0 {
			continue
		}
		full["names"] = left
		b, err := json.Marshal(full)
		if err != nil {
			return nil, err
		}
		kept = append(kept, b)
	}
	denied := slices.Sorted(slices.Values(Denied))
	deny, err := json.Marshal(map[string]any{"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
		"comment": "sandboxio: not needed by a sandbox (docs/security.md)"})
	if err != nil {
		return nil, err
	}
	p.Syscalls = append(kept, deny)
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
