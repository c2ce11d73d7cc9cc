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

// hoardInotify holds n inotify instances open in the sandbox until it is
// killed, and says how many it got.
const hoardInotify = `import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
for _ in range(int(sys.argv[1])):
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
print(len(fds), flush=True)
time.sleep(600)
`

// TestPerUserLimitsApart: one sandbox cannot use up a per-user kernel
// resource of another (ADR 31). Sandbox A opens more inotify instances
// than the host allows one user (fs.inotify.max_user_instances, 128); in
// sandbox B, files.watch still works and its code still gets an inotify
// instance. Before, every sandbox's user was host uid 1000: B's watch
// failed with SBX_E1603 and its code got EMFILE.
func TestPerUserLimitsApart(t *testing.T) {
	t.Parallel()
	if os.Getenv("SBX_TEST_PER_USER") != "1" {
		t.Skip("ADR 31 is not built yet: every runc sandbox is host uid 1000 (SBX_TEST_PER_USER=1 runs the attack and fails)")
	}
	b := newTestBackend(t, Config{})
	a := mustCreate(t, b, withImage(pythonImage))
	victim := mustCreate(t, b, withImage(pythonImage))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := make(chan string, 1)
	hoarder := make(chan struct{})
	go func() {
		defer close(hoarder)
		var out strings.Builder
		w := writerFunc(func(p []byte) (int, error) {
			n, err := out.Write(p)
			if strings.Contains(out.String(), "\n") {
				select {
				case got <- strings.TrimSpace(out.String()):
				default:
				}
			}
			return n, err
		})
		_, _ = b.Exec(ctx, a, worker.Process{Cmd: []string{"python3", "-c", hoardInotify, "200"}, Stdout: w})
	}()
	defer func() { cancel(); <-hoarder }()
	select {
	case n := <-got:
		t.Logf("sandbox A holds %s inotify instances", n)
		if n == "0" {
			t.Fatal("sandbox A got no inotify instance")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("sandbox A's hoarder did not start")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := b.WatchFiles(wctx, victim, events.FilesWatchRequest{SandboxID: victim, Path: "/work", TimeoutMS: 200}); err != nil {
		t.Errorf("files.watch in sandbox B while A hoards inotify: %v", err)
	}
	if n := sh(t, b, victim, "python3 -c 'import ctypes; print(ctypes.CDLL(None).inotify_init1(0) >= 0)'"); n != "True" {
		t.Errorf("inotify_init in sandbox B while A hoards: %q, want True", n)
	}
}
