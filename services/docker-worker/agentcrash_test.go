//go:build integration

package dockerworker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
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
