//go:build integration

package dockerworker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestAgentSocketChannel (ADR 24): a runc sandbox's agent talks to the
// worker over a unix socket the worker listens on, in a per-sandbox host
// directory the sandbox cannot write; the sandbox can neither change that
// directory, nor connect a second time, nor write into the agent's socket;
// its Docker attach stream is not the channel; the directory goes with the
// sandbox.
func TestAgentSocketChannel(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if b.sockBase == "" {
		t.Fatal("the socket channel is off on this host")
	}
	spec := newSpec(withImage(pythonImage))
	if out := mustCreateSpec(t, b, spec); out.ExecPath != events.ExecPathAgent {
		t.Fatalf("exec path %q (%s)", out.ExecPath, out.ExecPathNote)
	}
	sb := b.lookupCached(spec.SandboxID)
	if sb.sockName == "" || sb.agentOf() == nil {
		t.Fatalf("the sandbox does not use the socket channel: %q", sb.sockName)
	}
	dir := filepath.Join(b.cfg.AgentSocketDir, sb.sockName)
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o555 {
		t.Fatalf("socket directory %s: %v %v", dir, fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(b.cfg.AgentSocketDir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket base: %v %v", fi.Mode(), err)
	}

	// Nothing the sandbox does changes the directory.
	pid := sb.agentOf().Hello().PID
	r := run(t, b, spec.SandboxID, worker.Process{Cmd: []string{"sh", "-c", `cd /.sbx/run || exit 9
for a in "touch x" "ln -s / l" "mkfifo f" "rm -f agent.sock" "mv agent.sock y" "chmod 777 ."; do
  $a 2>/dev/null && echo "$a: allowed"
done
# The agent's own socket cannot be opened from outside it.
for f in /proc/` + itoa(pid) + `/fd/*; do
  case "$(readlink $f)" in socket:*) printf garbage > $f 2>/dev/null && echo "wrote into $f";; esac
done
python3 - <<'P'
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/.sbx/run/agent.sock")
    print("second connection accepted")
except OSError as e:
    pass
P
echo done`}})
	if got := strings.TrimSpace(r.stdout); got != "done" {
		t.Fatalf("the sandbox could change its channel:\n%s\nstderr %q", got, r.stderr)
	}
	ents, err := os.ReadDir(dir)
	if err == nil && len(ents) == 2 && ents[1].Name() == passwdFile {
		// The sandbox's /etc/passwd, with its own uid (ADR 31): unchanged.
		ents = ents[:1]
		if fi, err := os.Stat(filepath.Join(dir, passwdFile)); err != nil || fi.Mode() != 0o444 {
			t.Fatalf("passwd after the sandbox tried: %v %v", fi.Mode(), err)
		}
		if got := sh(t, b, spec.SandboxID, "whoami; head -1 /etc/passwd | cut -d: -f3"); got != "sandbox\n"+userOf(t, b, spec.SandboxID) {
			t.Fatalf("the sandbox's passwd: %q", got)
		}
	}
	if err != nil || len(ents) != 1 || ents[0].Name() != agentSocketName || ents[0].Type()&os.ModeSocket == 0 {
		t.Fatalf("socket directory after the sandbox tried: %v %v", ents, err)
	}
	// The channel still works: the socket, not the attach stream.
	if got := sh(t, b, spec.SandboxID, "echo still"); got != "still" {
		t.Fatalf("exec after: %q", got)
	}
	if got, _ := os.Readlink("/proc/" + itoa(agentHostPID(t, b, spec.SandboxID)) + "/fd/0"); got != "/dev/null" {
		t.Fatalf("the agent's stdin is %q, want /dev/null (no attach stream)", got)
	}

	if err := b.Kill(t.Context(), spec.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("socket directory after the kill: %v", err)
	}
}

// The attach stream stays where a host socket does not work: gVisor (runsc
// reaches no host socket without --host-uds), a daemon reached by the
// archive API, and ChannelAttach.
func TestAgentAttachChannelWhereNeeded(t *testing.T) {
	t.Parallel()
	t.Run("attach-config", func(t *testing.T) {
		t.Parallel()
		b := newTestBackend(t, Config{AgentChannel: ChannelAttach})
		id := mustCreate(t, b)
		if sb := b.lookupCached(id); sb.sockName != "" || sb.agentOf() == nil {
			t.Fatalf("channel %q, agent %v", sb.sockName, sb.agentOf() != nil)
		}
	})
	t.Run("copy", func(t *testing.T) {
		t.Parallel()
		b := newTestBackend(t, Config{Agent: AgentCopy})
		id := mustCreate(t, b)
		if sb := b.lookupCached(id); sb.sockName != "" || sb.agentOf() == nil {
			t.Fatalf("channel %q, agent %v", sb.sockName, sb.agentOf() != nil)
		}
	})
	t.Run("gvisor", func(t *testing.T) {
		t.Parallel()
		b := newTestBackend(t, Config{})
		needGVisor(t, b)
		id := mustCreate(t, b, withGVisor())
		sb := b.lookupCached(id)
		if sb.sockName != "" || sb.agentOf() == nil {
			t.Fatalf("channel %q, agent %v", sb.sockName, sb.agentOf() != nil)
		}
		if got := sh(t, b, id, "echo ok"); got != "ok" {
			t.Fatalf("exec: %q", got)
		}
	})
}

// TestAgentProcsFollowTheLimit: a real sandbox's agent runs Go code on as
// many processors as its CPU limit gives it, on runc's socket channel and
// under gVisor alike, not on the runtime's default of at least 2 (ADR 28).
func TestAgentProcsFollowTheLimit(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	for _, tc := range []struct {
		name string
		opts []createOpt
		want int
	}{
		{"runc, 1 CPU", []createOpt{withResources(events.Resources{CPUs: 1})}, 1},
		{"runc, half a CPU", []createOpt{withResources(events.Resources{CPUs: 0.5})}, 1},
		{"gVisor, 1 CPU", []createOpt{withGVisor(), withResources(events.Resources{CPUs: 1})}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "gVisor") {
				needGVisor(t, b)
			}
			spec := newSpec(tc.opts...)
			if out := mustCreateSpec(t, b, spec); out.ExecPath != events.ExecPathAgent {
				t.Fatalf("exec path %q (%s)", out.ExecPath, out.ExecPathNote)
			}
			if got := b.lookupCached(spec.SandboxID).agentOf().Hello().Procs; got != tc.want {
				t.Fatalf("the agent runs on %d processors, want %d", got, tc.want)
			}
		})
	}
}
