package modalworker_test

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	modalworker "github.com/sandboxio/sandboxio/services/modal-worker"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// TestCreateRefusesDisk: Modal's SDKs send no ephemeral disk for a sandbox
// ("not supported on Sandboxes"), so disk_mb is refused, coded, before
// anything is created.
func TestCreateRefusesDisk(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	_, err := b.Create(ctxT(t, 10*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b),
		Resources: events.Resources{DiskMB: 2048}, Deadline: time.Now().Add(time.Minute)})
	var sbx *events.Error
	if !errors.Is(err, events.ErrCapabilityNotSupported) || !errors.As(err, &sbx) || sbx.Details["field"] != "resources.disk_mb" {
		t.Fatalf("create with disk_mb: %v, want CapabilityNotSupported on resources.disk_mb", err)
	}
	if n := srv.Calls("SandboxCreate"); n != 0 {
		t.Fatalf("SandboxCreate called %d times", n)
	}
}

// TestExecRefusesRelativeCwd: Modal wants an absolute workdir (the SDKs
// check it); a relative one is refused with a validation code before any
// call.
func TestExecRefusesRelativeCwd(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	before := srv.Calls("TaskExecStart")
	_, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"pwd"}, Cwd: "tmp"})
	var sbx *events.Error
	if !errors.Is(err, events.ErrInvalidValue) || !errors.As(err, &sbx) || sbx.Details["field"] != "cwd" {
		t.Fatalf("exec with cwd tmp: %v, want InvalidValue on cwd", err)
	}
	if n := srv.Calls("TaskExecStart"); n != before {
		t.Fatalf("TaskExecStart called %d times for a refused exec", n-before)
	}
}

// TestLongSandboxID: a sandbox id of 64 characters (the longest valid id)
// does not fit a Modal tag (63): the tag carries a shortened, deterministic
// form and the sandbox's name the full id; find, list, adopt and kill work.
func TestLongSandboxID(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id := strings.Repeat("a", 30) + events.NewID()
	id += strings.Repeat("z", events.MaxIDLength-len(id))
	twin := id[:len(id)-1] + "y" // same prefix: the tags must still differ
	ctx := ctxT(t, time.Minute)
	for _, sid := range []string{id, twin} {
		if _, err := b.Create(ctx, worker.CreateSpec{SandboxID: sid, WorkerID: workerID(b), Deadline: time.Now().Add(10 * time.Minute)}); err != nil {
			t.Fatalf("create %s: %v", sid, err)
		}
	}
	info := sandboxOf(t, b, id)
	if tag := info.Tags[modalworker.TagSandbox]; len(tag) > 63 || tag == sandboxOf(t, b, twin).Tags[modalworker.TagSandbox] {
		t.Fatalf("tag %q (%d characters) for %s", tag, len(tag), id)
	}
	listed, err := b.ListSandboxes(ctx)
	if err != nil || len(listed) != 2 || listed[0].SandboxID != id && listed[1].SandboxID != id {
		t.Fatalf("ListSandboxes = %+v, %v; want both full ids", listed, err)
	}
	// Another backend of the same worker (a restart) adopts it by its tags.
	b2 := newBackend(t, srv, func(c *modalworker.Config) { c.WorkerID = workerID(b) })
	if out, _, _, err := run(t, b2, id, worker.Process{Cmd: []string{"echo", "adopted"}}); err != nil || out != "adopted\n" {
		t.Fatalf("exec after adoption: %q, %v", out, err)
	}
	for _, sid := range []string{id, twin} {
		if err := b.Kill(ctx, sid); err != nil {
			t.Fatalf("kill %s: %v", sid, err)
		}
	}
	if info, _ := srv.Sandbox(info.ID); info.Running {
		t.Fatalf("sandbox %s still running after kill", info.ID)
	}
}

// TestRouterStartsLate: a sandbox's router may take a while to come up on
// its worker after the task is scheduled. The first exec waits for it as
// Modal's SDKs do (Python: up to about 5 min to connect), not 4 s.
func TestRouterStartsLate(t *testing.T) {
	_, b := setup(t, modalfake.Options{RouterStartDelay: 6 * time.Second}, nil)
	id, _ := create(t, b, nil)
	if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"echo", "up"}}); err != nil || out != "up\n" {
		t.Fatalf("first exec: %q, %v", out, err)
	}
}

// TestKillEndsEveryProcess: terminating a Modal sandbox ends every process
// in its container, whatever its session; the fake holds to it (a setsid
// child whose parent exited used to outlive the sandbox and hold the fake's
// cleanup for minutes).
func TestKillEndsEveryProcess(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	out, _, st, err := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", `setsid sleep 307 >/dev/null 2>&1 </dev/null & echo $!`}})
	if err != nil || st.Code != 0 {
		t.Fatalf("spawn: %q %+v %v", out, st, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	// The child may still be setsid, about to exec sleep.
	sbxtest.Eventually(t, 10*time.Second, func() bool { return isSleep307(pid) }, "process %d never became the child", pid)
	if err := b.Kill(ctxT(t, 30*time.Second), id); err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return !isSleep307(pid) }, "setsid child %d outlived its sandbox", pid)
}

// isSleep307 reports whether pid is a live "sleep 307" (the fake's
// processes share the test's pid namespace).
func isSleep307(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || syscall.Kill(pid, 0) != nil {
		return false
	}
	st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i+1:]), " Z") {
		return false
	}
	return string(b) == "sleep\x00307\x00"
}

// TestEgressOnModal: the worker's network policy, as the fake enforces
// Modal's network_access (a namespace per BLOCKED or ALLOWLIST sandbox):
// deny reaches nothing, allow reaches the host, an allowlist reaches only
// what it lists.
func TestEgressOnModal(t *testing.T) {
	if !modalfake.NetworkEnforced() {
		t.Skip("modalfake cannot enforce network policies on this host (no network namespaces)")
	}
	other := hostAddr(t)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepts sync.WaitGroup
	accepts.Add(1)
	go func() {
		defer accepts.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); accepts.Wait() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, b := setup(t, modalfake.Options{}, nil)
	allow := events.EgressAllow
	tests := []struct {
		name    string
		policy  events.NetworkPolicy
		target  func(info modalfake.SandboxInfo) string
		reaches bool
	}{
		{"deny reaches nothing", events.NetworkPolicy{}, func(modalfake.SandboxInfo) string { return other }, false},
		{"allow reaches the host", events.NetworkPolicy{Egress: allow}, func(modalfake.SandboxInfo) string { return other }, true},
		{"allowlist reaches what it lists", events.NetworkPolicy{Egress: allow, Allow: []string{modalfake.HostNet}}, func(i modalfake.SandboxInfo) string { return i.HostAddr }, true},
		{"allowlist reaches nothing else", events.NetworkPolicy{Egress: allow, Allow: []string{modalfake.HostNet}}, func(modalfake.SandboxInfo) string { return other }, false},
		{"allowlist of one address", events.NetworkPolicy{Egress: allow, Allow: []string{other}}, func(modalfake.SandboxInfo) string { return other }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, info := create(t, b, func(s *worker.CreateSpec) { s.Network = tc.policy })
			probe := []string{"timeout", "3", "bash", "-c", `exec 3<>"/dev/tcp/$0/$1"`, tc.target(info), port}
			_, errOut, st, err := run(t, b, id, worker.Process{Cmd: probe})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Code == 0; got != tc.reaches {
				t.Fatalf("connect to %s:%s: exit %d (%s), want reached=%t", tc.target(info), port, st.Code, strings.TrimSpace(errOut), tc.reaches)
			}
		})
	}
}

// hostAddr is a non-loopback IPv4 address of the host outside the fake's
// veth range.
func hostAddr(t *testing.T) string {
	t.Helper()
	_, fakeNet, _ := net.ParseCIDR(modalfake.HostNet)
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !fakeNet.Contains(ipn.IP) {
			return ipn.IP.String()
		}
	}
	t.Skip("the host has no non-loopback IPv4 address")
	return ""
}
