package dockerworker

import (
	"bytes"
	_ "embed"
	"encoding/json"
)

// seccompProfile is the seccomp profile of every runc sandbox: Docker's
// default profile (github.com/moby/profiles/seccomp v0.1.0, Apache-2.0) with
// the calls in internal/seccompgen's Denied list removed from every allow
// rule and refused with EPERM (io_uring, ptrace, process_vm_*, bpf, kexec,
// userfaultfd, perf_event_open, keyctl, namespaces and mounts, ...), and
// socket(AF_VSOCK) refused by the default action. Regenerate it with
// internal/seccompgen; docs/security.md lists the calls.
//
//go:embed seccomp.json
var seccompProfile []byte

// seccompOpt is the security option that applies the profile: the daemon
// takes the profile's JSON itself, compacted.
var seccompOpt = func() string {
	var b bytes.Buffer
	if err := json.Compact(&b, seccompProfile); err != nil {
		panic("dockerworker: embedded seccomp.json: " + err.Error())
	}
	return "seccomp=" + b.String()
}()
