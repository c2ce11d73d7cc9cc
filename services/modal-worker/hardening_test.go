package modalworker_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
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
