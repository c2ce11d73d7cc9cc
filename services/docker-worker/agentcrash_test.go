//go:build integration

package dockerworker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// Legal input from inside a sandbox never ends it (issue 22): listing an
// empty directory (the agent indexed an empty listing and died: A.1), and a
// watched directory near the path bound that gets a long name (the event's
// path is over 4,096 bytes; the worker judged it a protocol violation and
// killed the sandbox: A.2).
func TestLegalInputKeepsTheSandbox(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{AgentBinary: os.Getenv("SBX_TEST_AGENT_BINARY")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Run("empty directories", func(t *testing.T) {
		id := mustCreate(t, b)
		for _, p := range []string{"/work", "/tmp", "/work"} {
			if fs, err := b.ListFiles(ctx, id, p); err != nil || len(fs) != 0 {
				t.Fatalf("list %s: %d files, %v", p, len(fs), err)
			}
		}
		if got := sh(t, b, id, "echo alive"); got != "alive" || b.lookupCached(id).agentOf() == nil {
			t.Fatalf("after the listings: %q", got)
		}
	})
	t.Run("an event path over the bound", func(t *testing.T) {
		id := mustCreate(t, b)
		// A directory of about 3,900 bytes, made from inside.
		dir := "/work"
		for len(dir) < 3900 {
			dir += "/" + strings.Repeat("d", min(200, 3900-len(dir)-1))
		}
		sh(t, b, id, "mkdir -p "+dir)
		got := make(chan error, 1)
		var reply events.FilesWatchReply
		go func() {
			var err error
			reply, err = b.WatchFiles(ctx, id, events.FilesWatchRequest{SandboxID: id, Path: dir, TimeoutMS: 20_000, MaxEvents: 10})
			got <- err
		}()
		// The watch is set up at a moment the test cannot see: files
		// with a 250-byte name until it answers.
		script := "cd " + dir + " && i=0; while [ $i -lt 200 ] && [ ! -e /tmp/stop ]; do touch $(printf '%03d' $i)" + strings.Repeat("n", 247) + "; i=$((i+1)); sleep 0.05; done"
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = runErr(t, b, id, worker.Process{Cmd: []string{"sh", "-c", script}}, 30*time.Second)
		}()
		var err error
		select {
		case err = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("no answer from the watch within 30 s")
		}
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		sh(t, b, id, "touch /tmp/stop")
		<-done
		if !reply.Truncated {
			t.Errorf("watch: %d events, not truncated: the dropped events are not reported", len(reply.Events))
		}
		if out := sh(t, b, id, "echo alive"); out != "alive" || b.lookupCached(id).agentOf() == nil {
			t.Fatalf("after the watch: %q", out)
		}
	})
}

// A sandbox whose agent crashes says why (issue 22, A.1; review #14): the
// first line of the Go runtime's report, which the agent writes to its
// stderr and the worker reads from the container (on the attach channel
// with the agent's stream, on the socket channel from a stderr-only
// attach), is in the registry's end reason and the kill record, with the
// exit code. The agent is built with its crash hook (SIGUSR2 panics on a
// goroutine of its own: nothing recovers it), sent from the host.
func TestAgentCrashSaysWhy(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sbx-agent")
	build := exec.Command("go", "build", "-tags", "sbxagent_crashhook", "-trimpath", "-o", bin, agent.Package)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent with its crash hook: %v: %s", err, out)
	}
	for _, ch := range []AgentChannel{ChannelAuto, ChannelAttach} {
		t.Run(string(ch), func(t *testing.T) {
			b := newTestBackend(t, Config{AgentBinary: bin, AgentChannel: ch})
			env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "up"}}); err != nil || string(r.Stdout) != "up\n" {
				t.Fatalf("exec before the crash: %+v %v", r, err)
			}
			if b.lookupCached(sb.SandboxID).agentOf() == nil {
				t.Fatal("the sandbox has no agent")
			}
			if pid := agentHostPID(t, b, sb.SandboxID); pid > 0 {
				if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
					t.Fatal(err)
				}
			}
			const want = "agent crashed (code 2): panic: crash hook: SIGUSR2"
			var rec *events.Sandbox
			eventually(t, 20*time.Second, "the registry saying gone", func() bool {
				r, err := env.Client.Get(ctx, sb.SandboxID)
				rec = r
				return err == nil && r.State.Ended()
			})
			t.Logf("get: state %s, end reason %q", rec.State, rec.EndReason)
			if !strings.Contains(rec.EndReason, want) {
				t.Errorf("end reason %q, want it to say %q", rec.EndReason, want)
			}
			if got := killReason(t, env, sb.SandboxID); !strings.Contains(got, want) {
				t.Errorf("kill record's reason %q, want it to say %q", got, want)
			}
		})
	}
}
