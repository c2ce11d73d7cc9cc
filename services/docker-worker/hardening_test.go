//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// statusField reads one field of /proc/self/status of a process in the sandbox.
func statusField(status, field string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestHardeningFromInside(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withResources(events.Resources{MemoryMB: 128, PIDs: 64, CPUs: 0.5}))

	status := run(t, b, id, worker.Process{Cmd: []string{"cat", "/proc/self/status"}}).stdout
	for _, tc := range []struct{ field, want string }{
		{"CapEff", "0000000000000000"},
		{"CapPrm", "0000000000000000"},
		{"CapBnd", "0000000000000000"},
		{"NoNewPrivs", "1"},
		{"Seccomp", "2"}, // filter mode: the default profile
	} {
		if got := statusField(status, tc.field); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.field, got, tc.want)
		}
	}
	checks := []struct {
		name, script, want string
	}{
		{"uid", "id -u", userOf(t, b, id)},
		{"gid", "id -g", "1000"},
		{"pid 1 is the agent", "cat /proc/1/comm", "sbx-agent"},
		{"pids limit", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max", "64"},
		{"memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", "134217728"},
		{"no swap", "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.swap.max 2>/dev/null || echo 134217728", "134217728"},
		{"cpu quota", "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null | tr '\\n' ' ' || cat /sys/fs/cgroup/cpu.max", "50000 100000"},
		{"no docker socket", "ls /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such file'", "2"},
		{"only loopback", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", "lo"},
		{"writable work dir", "touch /work/x && echo ok", "ok"},
		{"cwd", "pwd", "/work"},
	}
	for _, c := range checks {
		if got := strings.TrimSpace(sh(t, b, id, c.script)); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}

	// A fork bomb is bounded by the pids limit.
	sleeps := sh(t, b, id, "ps -o comm | grep -c sleep || true") // the main process's, without the agent
	r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "for i in $(seq 200); do sleep 2 & done; wait"}})
	if !strings.Contains(r.stderr, "can't fork") && !strings.Contains(r.stderr, "Resource temporarily unavailable") {
		t.Errorf("200 forks with pids limit 64: stderr %q, want fork failures", r.stderr)
	}
	eventually(t, 10*time.Second, "fork bomb gone", func() bool {
		r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "ps -o comm | grep -c sleep"}})
		return strings.TrimSpace(r.stdout) == sleeps
	})

	// Zombies are reaped by the agent (PID 1): an orphan that exits leaves nothing.
	sh(t, b, id, "(sleep 0.2 &) ; exit 0")
	eventually(t, 10*time.Second, "orphan reaped", func() bool {
		return sh(t, b, id, "ps -o stat,comm | grep -c '^Z' || true") == "0"
	})

	// No privileges, no host namespaces, default seccomp: checked from the
	// daemon's side too.
	ins, err := b.cli.ContainerInspect(context.Background(), namePrefix+id)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if hc.Privileged || hc.PidMode.IsHost() || hc.NetworkMode.IsHost() || hc.IpcMode.IsHost() || hc.UTSMode.IsHost() ||
		hc.UsernsMode.IsHost() || len(hc.Binds) > 0 {
		t.Errorf("host config not hardened: %+v", hc)
	}
	// PID 1 is the agent itself (ADR 29), not under docker-init.
	if hc.Init != nil && *hc.Init {
		t.Errorf("an agent sandbox runs under docker-init")
	}
	for _, o := range hc.SecurityOpt {
		if strings.Contains(o, "unconfined") {
			t.Errorf("security opt %q", o)
		}
	}
	for _, l := range []string{LabelSandbox, LabelWorker, LabelOwner, LabelDeadline, LabelCreated, LabelMetaPrefix + "team"} {
		if ins.Config.Labels[l] == "" {
			t.Errorf("label %s missing: %v", l, ins.Config.Labels)
		}
	}
}

func TestOOMKillReported(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withImage(pythonImage), withResources(events.Resources{MemoryMB: 64}))
	r := run(t, b, id, worker.Process{Cmd: []string{"python3", "-c", "a = bytearray(512 * 1024 * 1024); print(len(a))"}})
	if !r.status.OOMKilled || r.status.Code != 137 {
		t.Fatalf("status %+v, want OOMKilled with 137 (stderr %q)", r.status, r.stderr)
	}
	// The next exec that ends by SIGKILL for another reason is not an OOM.
	r = run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "kill -9 $$"}})
	if r.status.OOMKilled || r.status.Code != 137 || r.status.Signal != "KILL" {
		t.Fatalf("status %+v, want a plain KILL", r.status)
	}
	// The sandbox survives its OOM.
	if got := sh(t, b, id, "echo alive"); got != "alive" {
		t.Fatal(got)
	}
}

func TestReadOnlyRoot(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withReadOnly())
	for _, c := range []struct {
		script string
		ok     bool
	}{
		{"touch /etc/x", false},
		{"touch /x", false},
		{"touch /work/x", true},
		{"touch /tmp/x", true},
	} {
		r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", c.script}})
		if (r.status.Code == 0) != c.ok {
			t.Errorf("%s: exit %d (stderr %q), want success %t", c.script, r.status.Code, r.stderr, c.ok)
		}
	}
	// /tmp is noexec.
	r := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "cp /bin/busybox /tmp/bb && /tmp/bb true"}})
	if r.status.Code == 0 {
		t.Errorf("exec from /tmp succeeded")
	}
	// The files API reaches the writable work directory.
	ctx := context.Background()
	if err := b.WriteFile(ctx, id, "/work/f.txt", 0o644, strings.NewReader("hi"), 2); err != nil {
		t.Fatalf("WriteFile on read-only root's /work: %v", err)
	}
	if got := sh(t, b, id, "cat /work/f.txt"); got != "hi" {
		t.Errorf("got %q", got)
	}
	if err := b.WriteFile(ctx, id, "/etc/f.txt", 0o644, strings.NewReader("hi"), 2); err == nil {
		t.Errorf("WriteFile to read-only /etc succeeded")
	}
}

func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	ctx := context.Background()

	t.Run("bad allowlist refused before anything is created", func(t *testing.T) {
		spec := newSpec(withNetwork(events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"example.com", "10.0.0.0/1"}}))
		_, err := b.Create(ctx, spec)
		var e *events.Error
		if !errors.As(err, &e) || (e.Code != events.CodeEgressCIDRTooBroad && e.Code != events.CodeCapabilityNotSupp) {
			t.Fatalf("err = %v, want EgressCIDRTooBroad (or CapabilityNotSupported without host rules)", err)
		}
		list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", LabelSandbox+"="+spec.SandboxID))})
		if err != nil || len(list) != 0 {
			t.Fatalf("containers after a refused create: %v %v", list, err)
		}
	})
	t.Run("deny has only loopback", func(t *testing.T) {
		id := mustCreate(t, b, withNetwork(events.NetworkPolicy{Egress: events.EgressDeny}))
		if got := sh(t, b, id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,"); got != "lo," {
			t.Errorf("interfaces %q", got)
		}
	})
	t.Run("allow with empty list is the sandbox's own network", func(t *testing.T) {
		if b.egress.mgr == nil {
			t.Skip("egress allow unavailable here: " + b.egress.why)
		}
		id := mustCreate(t, b, withNetwork(events.NetworkPolicy{Egress: events.EgressAllow}))
		if got := sh(t, b, id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,"); got != "eth0,lo," {
			t.Errorf("interfaces %q", got)
		}
		ins, err := b.cli.ContainerInspect(ctx, namePrefix+id)
		if err != nil || string(ins.HostConfig.NetworkMode) != "sbx-net-"+id {
			t.Errorf("network mode %v %v", ins.HostConfig.NetworkMode, err)
		}
	})
}

func TestRuntimeTiers(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if tier, ok := b.RuntimeTier(""); !ok || tier != events.TierContainer {
		t.Errorf("default runtime: %v %v", tier, ok)
	}
	if b.Info().Isolation != events.TierContainer {
		t.Errorf("info isolation %v", b.Info().Isolation)
	}
	if _, ok := b.RuntimeTier(RuntimeRunsc); ok {
		t.Skip("runsc is registered here; its test is TestGVisor")
	}
	spec := newSpec()
	spec.Spec.Runtime = RuntimeRunsc
	if _, err := b.Create(context.Background(), spec); !errors.Is(err, events.ErrIsolationUnavailable) {
		t.Fatalf("runsc create without runsc: %v", err)
	}
	spec = newSpec()
	spec.Spec.RequireIsolation = events.TierGVisor
	if _, err := b.Create(context.Background(), spec); !errors.Is(err, events.ErrIsolationUnavailable) {
		t.Fatalf("gvisor requirement on runc: %v", err)
	}
}

func TestImageNotFound(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Images: []string{"sandboxio/no-such-image"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := b.Create(ctx, newSpec(withImage("sandboxio/no-such-image:latest")))
	if !errors.Is(err, events.ErrImageNotFound) {
		t.Fatalf("err = %v, want ImageNotFound", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "sandboxio/no-such-image:latest") || !strings.Contains(msg, "deploy/images/build.sh") {
		t.Errorf("message %q should name the image and deploy/images/build.sh", msg)
	}
	t.Logf("failed after %s", time.Since(start))
}

// TestImageAllowlist: a dsn outside the allowlist is refused before the
// daemon is asked; an allowed digest that is not on the host fails at once
// (no pull) unless the operator allows pulls.
func TestImageAllowlist(t *testing.T) {
	t.Parallel()
	const dig = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b := newTestBackend(t, Config{Images: append([]string{"busybox@" + dig}, BuiltImages...)})
	ctx := context.Background()
	for _, c := range []struct {
		image string
		want  error
	}{
		{"alpine@" + dig, events.ErrImageNotAllowed},
		{"alpine:latest", events.ErrImageNotAllowed},
		{"sandboxio/python:3.12", events.ErrImageNotAllowed},
		{"alpine@sha256:abc", events.ErrInvalidImageRef},
		{"Not A Ref", events.ErrInvalidImageRef},
		{"busybox@" + dig, events.ErrImageNotFound},
	} {
		start := time.Now()
		spec := newSpec(withImage(c.image))
		_, err := b.Create(ctx, spec)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.image, err, c.want)
			continue
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %s: the daemon was asked to pull?", c.image, d)
		}
		if c.want == events.ErrImageNotFound && !strings.Contains(err.Error(), "pulling is disabled") {
			t.Errorf("%s: %v, want the no-pull reason", c.image, err)
		}
	}
	// The class images are allowed.
	mustCreate(t, b, withImage(pythonImage))
}

// TestGVisor runs only where the daemon has runsc registered.
func TestGVisor(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if tier, ok := b.RuntimeTier(RuntimeRunsc); !ok || tier != events.TierGVisor {
		t.Skip("runsc is not registered with this docker daemon")
	}
	spec := newSpec()
	spec.Spec.Runtime = RuntimeRunsc
	spec.Spec.RequireIsolation = events.TierGVisor
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	// gVisor's kernel announces itself in dmesg.
	if got := sh(t, b, spec.SandboxID, "dmesg 2>/dev/null | head -1 | grep -c gVisor || true"); got != "1" {
		t.Errorf("not running under gVisor: %q", got)
	}
}
