// Command syscalls tries, inside a sandbox, the system calls the sandbox's
// seccomp profile must refuse, and prints one line per call: its name and
// "denied <errno>" or "allowed". The docker backend's integration tests build
// it statically (CGO_ENABLED=0) and copy it in.
package main

import (
	"fmt"
	"syscall"
	"unsafe"
)

func main() {
	params := make([]byte, 120) // struct io_uring_params
	cases := []struct {
		name string
		call func() (uintptr, syscall.Errno)
	}{
		{"io_uring_setup", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall(425, 8, uintptr(unsafe.Pointer(&params[0])), 0)
			return r, e
		}},
		{"io_uring_enter", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(426, 0, 0, 0, 0, 0, 0); return r, e }},
		{"io_uring_register", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(427, 0, 0, 0, 0, 0, 0); return r, e }},
		{"socket_af_vsock", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, 40, syscall.SOCK_STREAM, 0)
			return r, e
		}},
		{"ptrace_attach_pid1", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall6(syscall.SYS_PTRACE, syscall.PTRACE_ATTACH, 1, 0, 0, 0, 0)
			return r, e
		}},
		{"ptrace_traceme", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall6(syscall.SYS_PTRACE, syscall.PTRACE_TRACEME, 0, 0, 0, 0, 0)
			return r, e
		}},
		{"process_vm_readv", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall6(310, 1, 0, 0, 0, 0, 0)
			return r, e
		}},
		{"bpf", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall(321, 0, 0, 0); return r, e }},
		{"userfaultfd", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall(323, 0, 0, 0); return r, e }},
		{"perf_event_open", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(298, 0, 0, 0, 0, 0, 0); return r, e }},
		{"keyctl", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(250, 0, 0, 0, 0, 0, 0); return r, e }},
		{"add_key", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(248, 0, 0, 0, 0, 0, 0); return r, e }},
		{"kexec_load", func() (uintptr, syscall.Errno) { r, _, e := syscall.RawSyscall6(246, 0, 0, 0, 0, 0, 0); return r, e }},
		{"unshare_newuser", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall(syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER, 0, 0)
			return r, e
		}},
		{"kill_pid1_sigstop", func() (uintptr, syscall.Errno) {
			r, _, e := syscall.RawSyscall(syscall.SYS_KILL, 1, uintptr(syscall.SIGSTOP), 0)
			return r, e
		}},
	}
	for _, c := range cases {
		r, e := c.call()
		if e != 0 {
			fmt.Printf("%s denied %d\n", c.name, int(e))
			continue
		}
		fmt.Printf("%s allowed %d\n", c.name, int(r))
	}
}
