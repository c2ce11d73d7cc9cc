//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// buildSyscalls builds testdata/syscalls statically for the sandbox.
func buildSyscalls(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "syscalls")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/syscalls")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/syscalls: %v\n%s", err, b)
	}
	return out
}

func copyIn(t *testing.T, b *Backend, id, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFile(context.Background(), id, dst, 0o755, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("copy %s into the sandbox: %v", dst, err)
	}
}

// TestKernelSurface: the sandbox's seccomp profile refuses io_uring,
// AF_VSOCK, ptrace (of PID 1 and of itself), process_vm_*, bpf,
// userfaultfd, perf_event_open, the keyring, kexec and user namespaces; a
// SIGSTOP to PID 1 does not stop it.
func TestKernelSurface(t *testing.T) {
	t.Parallel()
	bin := buildSyscalls(t)
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	copyIn(t, b, id, bin, "/work/sbx-syscalls")
	r := run(t, b, id, worker.Process{Cmd: []string{"/work/sbx-syscalls"}})
	if r.status.Code != 0 {
		t.Fatalf("syscalls: exit %d, stderr %q", r.status.Code, r.stderr)
	}
	denied := 0
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("line %q", line)
		}
		name, verdict := f[0], f[1]
		errno, _ := strconv.Atoi(f[2])
		t.Logf("%-28s %s %s", name, verdict, syscall.Errno(errno))
		if name == "kill_pid1_sigstop" {
			continue // the kernel drops it (PID 1 of a namespace): checked below
		}
		if verdict != "denied" || (syscall.Errno(errno) != syscall.EPERM && syscall.Errno(errno) != syscall.ENOSYS) {
			t.Errorf("%s: %s %v, want denied with EPERM", name, verdict, syscall.Errno(errno))
			continue
		}
		denied++
	}
	t.Logf("calls denied: %d", denied)
	if denied < 14 {
		t.Errorf("%d calls denied, want 14", denied)
	}
	// PID 1 is neither stopped nor traced after the attempts.
	st := sh(t, b, id, "cat /proc/1/status")
	if s := statusField(st, "State"); strings.HasPrefix(s, "T") || strings.HasPrefix(s, "t") {
		t.Errorf("PID 1 state %q after SIGSTOP/ptrace", s)
	}
	if tp := statusField(st, "TracerPid"); tp != "0" {
		t.Errorf("PID 1 TracerPid %s", tp)
	}
	if got := sh(t, b, id, "echo alive"); got != "alive" {
		t.Errorf("sandbox after the attempts: %q", got)
	}
}

// dfUsed is the bytes used on the filesystem holding dir.
func dfUsed(t *testing.T, dir string) int64 {
	t.Helper()
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(s.Blocks-s.Bfree) * int64(s.Bsize)
}

// TestDiskQuota fills /work, /tmp, the home directory and the root
// filesystem of a sandbox with disk_mb 64: each write stops at its quota
// with a clear error inside the sandbox, and the host's disk grows by at
// most the quota.
func TestDiskQuota(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if b.DiskQuotaMode() == DiskNone {
		t.Fatal("no disk quota mode on this host")
	}
	if !b.Info().Capabilities.Has(events.CapDiskQuota) {
		t.Errorf("capabilities %v lack disk_quota", b.Info().Capabilities)
	}
	const quotaMB = 64
	id := mustCreate(t, b, withImage(pythonImage), withResources(events.Resources{MemoryMB: 256, DiskMB: quotaMB}))
	info, err := b.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := dfUsed(t, info.DockerRootDir)

	fill := func(target string) (int64, string) {
		r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c",
			"dd if=/dev/zero of=" + target + " bs=1M count=1024 2>&1; sync; stat -c %s " + target + " 2>/dev/null || echo 0"}})
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		n, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		return n, r.stdout
	}
	for _, c := range []struct {
		target  string
		limitMB int64
		errText string
	}{
		{"/work/fill", quotaMB, "No space left on device"},
		{"/tmp/fill", int64(b.cfg.TmpfsSizeMB), "No space left on device"},
		{"/home/sandbox/fill", int64(b.cfg.TmpfsSizeMB), "No space left on device"},
		{"/var/tmp/fill", 0, "Read-only file system"},
		{"/fill", 0, ""},
	} {
		n, out := fill(c.target)
		t.Logf("dd 1 GiB into %s: %d bytes written", c.target, n)
		if n > c.limitMB<<20 {
			t.Errorf("%s: %d bytes written, quota %d MiB", c.target, n, c.limitMB)
		}
		if c.errText != "" && !strings.Contains(out, c.errText) {
			t.Errorf("%s: output %q, want %q", c.target, out, c.errText)
		}
		sh(t, b, id, "rm -f "+c.target)
	}
	// Inodes: the quota volume has a bounded number.
	r := run(t, b, id, worker.Process{Cmd: []string{"python3", "-c", `
import os
n = 0
try:
    while n < 1000000:
        open("/work/f%d" % n, "w").close()
        n += 1
except OSError as e:
    print(n, e.strerror)
`}})
	t.Logf("files created in /work until refused: %s", strings.TrimSpace(r.stdout))
	f := strings.Fields(r.stdout)
	if len(f) < 2 || !strings.Contains(r.stdout, "No space left on device") {
		t.Errorf("inode fill: %q %q", r.stdout, r.stderr)
	} else if n, _ := strconv.Atoi(f[0]); n > inodesFor(quotaMB) {
		t.Errorf("%d files created, inode limit %d", n, inodesFor(quotaMB))
	}
	after := dfUsed(t, info.DockerRootDir)
	t.Logf("host disk (%s) grew by %d bytes during the fills (quota %d bytes)", info.DockerRootDir, after-before, int64(quotaMB)<<20)
	// Other tests share the disk: allow them some room, but not a second quota.
	if after-before > int64(quotaMB)<<20+32<<20 {
		t.Errorf("host disk grew by %d bytes, quota %d MiB", after-before, quotaMB)
	}
}

func TestDiskQuotaRefusals(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{MaxResources: events.Resources{DiskMB: 512}})
	ctx := context.Background()
	for _, c := range []struct {
		name string
		res  events.Resources
		want error
	}{
		{"above the operator maximum", events.Resources{MemoryMB: 2048, DiskMB: 1024}, events.ErrDiskQuotaTooLarge},
		{"memory-backed quota above memory", events.Resources{MemoryMB: 128, DiskMB: 256}, events.ErrDiskQuotaTooLarge},
	} {
		if c.name == "memory-backed quota above memory" && b.DiskQuotaMode() != DiskTmpfs {
			continue
		}
		_, err := b.Create(ctx, newSpec(withResources(c.res)))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	none := newTestBackend(t, Config{DiskQuota: DiskNone})
	if none.Info().Capabilities.Has(events.CapDiskQuota) {
		t.Errorf("mode none advertises disk_quota")
	}
	if _, err := none.Create(ctx, newSpec(withResources(events.Resources{DiskMB: 64}))); !errors.Is(err, events.ErrCapabilityNotSupported) {
		t.Errorf("disk_mb on a worker without quota: %v, want CapabilityNotSupported", err)
	}
	// Without disk_mb it still creates.
	mustCreate(t, none)
}

// TestUserNamespaces: the backend says whether the daemon remaps users, a
// sandbox's uid_map agrees, and RequireUserNS refuses a daemon without it.
func TestUserNamespaces(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	uidMap := strings.Fields(sh(t, b, id, "cat /proc/self/uid_map"))
	identity := len(uidMap) == 3 && uidMap[0] == "0" && uidMap[1] == "0" && uidMap[2] == "4294967295"
	t.Logf("daemon remaps users: %t; uid_map in the sandbox: %v", b.UserNamespaces(), uidMap)
	if identity == b.UserNamespaces() {
		t.Errorf("UserNamespaces() = %t but uid_map is %v", b.UserNamespaces(), uidMap)
	}
	if b.UserNamespaces() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := NewBackend(ctx, Config{WorkerID: randID("test-"), RequireUserNS: true}); err == nil ||
		!strings.Contains(err.Error(), "userns-remap") {
		t.Errorf("RequireUserNS on a daemon without remapping: %v", err)
	}
}

// TestSparseFileRead: a 1.5 GB sparse file (no blocks) is refused by its
// size before a byte is read.
func TestSparseFileRead(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	sh(t, b, id, "truncate -s 1500M /work/sparse")
	ctx := worker.WithReadLimit(context.Background(), worker.DefaultMaxFileReadBytes)
	var sink bytes.Buffer
	n, err := b.ReadFile(ctx, id, "/work/sparse", &sink)
	if !errors.Is(err, events.ErrFileReadTooLarge) || n != 0 || sink.Len() != 0 {
		t.Fatalf("read of a 1500M sparse file: %d bytes, %v; want FileReadTooLarge and nothing read", n, err)
	}
	t.Logf("refused: %v", err)
}

// TestPID1 : without the agent, the sandbox's init runs as root; a process
// of the sandbox user can neither stop it, signal it, nor touch its memory.
// (With the agent, PID 1 is the sandbox user's: TestPID1WithAgent.)
func TestPID1(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Agent: AgentOff})
	id := mustCreate(t, b, withImage(pythonImage))
	st := sh(t, b, id, "cat /proc/1/status")
	if uid := strings.Fields(statusField(st, "Uid")); len(uid) == 0 || uid[0] != "0" {
		t.Errorf("PID 1 uid %v, want 0", uid)
	}
	if got := sh(t, b, id, "id -u; echo $HOME"); got != userOf(t, b, id)+"\n/home/sandbox" {
		t.Errorf("exec user and home: %q", got)
	}
	r := run(t, b, id, worker.Process{Cmd: []string{"python3", "-c", `
import os
for what, f in [("read /proc/1/mem", lambda: open("/proc/1/mem", "rb").read(1)),
                ("write /proc/1/mem", lambda: open("/proc/1/mem", "r+b")),
                ("read /proc/1/environ", lambda: open("/proc/1/environ", "rb").read()),
                ("kill -TERM 1", lambda: os.kill(1, 15)),
                ("kill -STOP 1", lambda: os.kill(1, 19)),
                ("kill -KILL the keep-alive", lambda: [os.kill(int(p), 9) for p in os.listdir("/proc") if p.isdigit() and open("/proc/%s/comm" % p).read().strip() == "sleep"] or 1/0)]:
    try:
        f()
        print(what, "allowed")
    except (PermissionError, ZeroDivisionError) as e:
        print(what, "denied", type(e).__name__)
    except OSError as e:
        print(what, "denied", e.strerror)
`}})
	t.Logf("from the sandbox user:\n%s", r.stdout)
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.Contains(line, " denied") {
			t.Errorf("%s", line)
		}
	}
	if got := sh(t, b, id, "echo alive; cut -d' ' -f3 /proc/1/stat"); got != "alive\nS" {
		t.Errorf("sandbox after the attempts: %q", got)
	}
}

// TestPID1WithAgent: with the agent (the container's main process, which
// cannot change credentials), docker-init and the agent run as the sandbox
// user (ADR 15). ptrace is still denied by seccomp, and a sandbox that
// signals its PID 1 can end only itself.
func TestPID1WithAgent(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withImage(pythonImage))
	other := mustCreate(t, b)
	if p := b.lookupCached(id).agentOf(); p == nil {
		t.Fatal("sandbox has no agent")
	}
	st := sh(t, b, id, "cat /proc/1/status")
	if uid := strings.Fields(statusField(st, "Uid")); len(uid) == 0 || uid[0] != userOf(t, b, id) {
		t.Errorf("PID 1 uid %v, want the sandbox user %s", uid, userOf(t, b, id))
	}
	r := run(t, b, id, worker.Process{Cmd: []string{"python3", "-c", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("ptrace attach 1", "allowed" if libc.ptrace(16, 1, 0, 0) == 0 else "denied " + os.strerror(ctypes.get_errno()))
`}})
	if !strings.Contains(r.stdout, "ptrace attach 1 denied") {
		t.Errorf("ptrace of PID 1: %q", r.stdout)
	}
	// Whatever kill -TERM 1 does to this sandbox, the other one lives on.
	_, err := runErr(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "kill -TERM 1; kill -KILL 1; sleep 2"}}, 20*time.Second)
	t.Logf("after kill -TERM 1: %v", err)
	if got := sh(t, b, other, "echo alive"); got != "alive" {
		t.Errorf("the other sandbox after kill -TERM 1 in the first: %q", got)
	}
}
