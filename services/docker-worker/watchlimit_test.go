//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestWatchFilesDefaults: Backend.WatchFiles with MaxEvents (and
// TimeoutMS) 0 went to the agent as a watch of 0 events, which the agent
// refuses as a protocol violation: the watch failed and the agent's
// connection with it. The backend sets the defaults first: the watch sees
// a file made meanwhile, and the sandbox's agent answers after it.
func TestWatchFilesDefaults(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type watched struct {
		r   events.FilesWatchReply
		err error
	}
	done := make(chan watched, 1)
	go func() {
		r, err := b.WatchFiles(ctx, id, events.FilesWatchRequest{SandboxID: id, Path: "/work"})
		done <- watched{r, err}
	}()
	var got watched
	for i := 0; ; i++ {
		sh(t, b, id, "touch /work/f"+strings.Repeat("x", i%3))
		select {
		case got = <-done:
		case <-time.After(200 * time.Millisecond):
			if ctx.Err() == nil {
				continue
			}
			t.Fatal("the watch did not answer")
		}
		break
	}
	if got.err != nil || len(got.r.Events) == 0 {
		t.Fatalf("a watch with max_events 0: %v, %+v; want the touched file's events", got.err, got.r)
	}
	if _, err := b.Exec(ctx, id, worker.Process{Cmd: []string{"true"}}); err != nil {
		t.Fatalf("an exec after the watch: %v", err)
	}
	if b.lookupCached(id).agentOf() == nil {
		t.Fatal("the sandbox lost its agent")
	}
}

// TestWatchLimitCoded: a files.watch in a sandbox whose processes hold
// every inotify instance its user may have (fs.inotify.max_user_instances)
// failed with an uncoded backend error (SBX_E1603). It is SBX_E1312
// WatchLimitReached, naming the limit, and the sandbox goes on.
func TestWatchLimitCoded(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	if !b.ownsUID(shape{runtime: "runc"}, "1000:1000") {
		t.Skip("sandboxes share the image's uid here: hoarding its inotify instances would fail other tests' watches (ADR 31)")
	}
	id := mustCreate(t, b, withImage(pythonImage))
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
		_, _ = b.Exec(ctx, id, worker.Process{Cmd: []string{"python3", "-c", hoardInotify, "200"}, Stdout: w})
	}()
	defer func() { cancel(); <-hoarder }()
	select {
	case n := <-got:
		t.Logf("the sandbox holds %s inotify instances", n)
	case <-time.After(60 * time.Second):
		t.Fatal("the hoarder did not start")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	_, err := b.WatchFiles(wctx, id, events.FilesWatchRequest{SandboxID: id, Path: "/work", TimeoutMS: 200, MaxEvents: 10})
	var e *events.Error
	if !errors.As(err, &e) || e.Code != events.CodeWatchLimit || e.Details["limit"] != "fs.inotify.max_user_instances" {
		t.Fatalf("files.watch with the user's inotify instances used up: %v, want SBX_E1312 naming fs.inotify.max_user_instances", err)
	}
	if got := sh(t, b, id, "echo alive"); got != "alive" {
		t.Fatalf("the sandbox after the refused watch: %q", got)
	}
}
