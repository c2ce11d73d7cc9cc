//go:build integration

package dockerworker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

// memAttack is the attack of issue 22 (C.16), run as the sandbox user: find
// PID 1 and the agent, open each one's /proc/PID/mem for writing and, if
// that works, overwrite the first bytes of its environment with pwrite. It
// prints one line a target: "PID open EACCES" (what must happen) or
// "PID wrote" / "PID open OTHER".
const memAttack = `
import errno, os
def agent():
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 1 and cmd[0].endswith(b"sbx-agent") and cmd[1] == b"serve":
            return int(p)
    return None
targets = [1]
a = agent()
print("agent", a)
if a is not None and a != 1:
    targets.append(a)
for pid in targets:
    try:
        fd = os.open("/proc/%d/mem" % pid, os.O_RDWR)
    except OSError as e:
        print(pid, "open", errno.errorcode.get(e.errno, e.errno))
        continue
    stat = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    env_start = int(stat[47])
    os.pwrite(fd, b"PWNED=1\0", env_start)
    os.close(fd)
    print(pid, "wrote", open("/proc/%d/environ" % pid, "rb").read()[:8])
`

// Neither PID 1 nor the agent may be read or written through /proc/PID/mem
// by code in the sandbox: both run as the sandbox user, and the agent makes
// itself non-dumpable (issue 22, C.16).
func TestAgentMemoryClosedToTheSandbox(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	tests := []struct {
		name string
		opts []createOpt
		gvis bool
	}{
		{"runc", []createOpt{withImage(pythonImage)}, false},
		{"gvisor", []createOpt{withImage(pythonImage), withGVisor()}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.gvis {
				needGVisor(t, b)
			}
			id := mustCreate(t, b, tt.opts...)
			if b.lookupCached(id).agentOf() == nil {
				t.Fatal("sandbox has no agent")
			}
			r := run(t, b, id, worker.Process{Cmd: []string{"python3", "-c", memAttack}})
			out := strings.TrimSpace(r.stdout)
			t.Logf("attack: %q (stderr %q)", out, r.stderr)
			if r.status.Code != 0 || strings.Contains(out, "agent None") {
				t.Fatalf("the attack did not run: exit %d, %q, stderr %q", r.status.Code, out, r.stderr)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "agent") {
					continue
				}
				if !strings.HasSuffix(line, " open EACCES") {
					t.Errorf("the sandbox opened a protected process's memory: %q", line)
				}
			}
			if !strings.Contains("\n"+out, "\n1 ") {
				t.Errorf("PID 1 was not tried: %q", out)
			}
			// Signals the sandbox can send do not end its PID 1, and the
			// processes it starts keep their default dispositions.
			sigs := []string{"TERM", "INT", "HUP", "QUIT", "SEGV", "ABRT", "BUS", "KILL"}
			if tt.gvis {
				// gVisor delivers a SIGKILL sent to PID 1 from inside its
				// namespace (Linux drops it): the sandbox may end itself.
				sigs = sigs[:len(sigs)-1]
			}
			for _, sig := range sigs {
				_ = sh(t, b, id, "kill -"+sig+" 1 || true")
			}
			if got := sh(t, b, id, "sleep 30 & p=$!; kill -TERM $p; wait $p; echo $?"); got != "143" {
				t.Errorf("a process the agent started ignores SIGTERM: wait said %q", got)
			}
			if got := sh(t, b, id, "echo alive"); got != "alive" || b.lookupCached(id).agentOf() == nil {
				t.Errorf("after the attack and the signals: %q, agent %v", got, b.lookupCached(id).agentOf() != nil)
			}
		})
	}
}

// agentHostPID is the pid, in the host's namespace, of a sandbox's agent:
// the container's main process (0 and a test error when not found).
func agentHostPID(t *testing.T, b *Backend, id string) int {
	t.Helper()
	c, err := b.cli.ContainerInspect(context.Background(), b.lookupCached(id).containerID)
	if err != nil || c.State == nil || c.State.Pid <= 0 {
		t.Errorf("the agent's host pid: %v", err)
		return 0
	}
	return c.State.Pid
}

// writeAgentFD writes p into descriptor fd of the agent with host pid pid,
// as the agent itself would (the test runs as root on the daemon's host).
func writeAgentFD(t *testing.T, pid, fd int, p []byte) {
	if pid == 0 {
		return
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.Write(p); err != nil {
		t.Error(err)
	}
}
