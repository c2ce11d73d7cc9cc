//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestFilesWatch: files.watch through the router, the worker and the agent:
// a file created, written, renamed and removed in the work directory by an
// exec is seen as create, write, rename, create, remove, with absolute
// paths; a watch of /proc is refused; a sandbox without the agent cannot
// watch.
func TestFilesWatch(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120, Class: "base"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sbxtest.WatchWhile(t, ctx, env.Client, sb.SandboxID, "/work", 20*time.Second, 30*time.Second, func(i int) error {
		n := strconv.Itoa(i)
		_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c",
			"echo x > /work/f" + n + "; mv /work/f" + n + " /work/g" + n + "; rm /work/g" + n}})
		return err
	})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	var seen []string
	for _, ev := range rep.Events {
		seen = append(seen, ev.Type+" "+ev.Path)
	}
	found := false
	for k := 0; k+4 < len(seen) && !found; k++ {
		if len(seen[k]) < len("create /work/f") || seen[k][:len("create /work/f")] != "create /work/f" {
			continue
		}
		n := seen[k][len("create /work/f"):]
		want := []string{"create /work/f" + n, "write /work/f" + n, "rename /work/f" + n, "create /work/g" + n, "remove /work/g" + n}
		found = true
		for j, w := range want {
			if seen[k+j] != w {
				found = false
			}
		}
	}
	if !found {
		t.Fatalf("events %q: no whole create, write, rename, create, remove cycle", seen)
	}
	t.Logf("watch saw %d events: %q", len(seen), seen)

	if _, err := env.Client.WatchFiles(ctx, sb.SandboxID, "/proc", time.Second, 0); !errors.Is(err, events.ErrForbidden) {
		t.Errorf("watch /proc: %v, want Forbidden", err)
	}
	if _, err := env.Client.WatchFiles(ctx, sb.SandboxID, "/work/missing", time.Second, 0); !errors.Is(err, events.ErrFileNotFound) {
		t.Errorf("watch of a missing directory: %v, want FileNotFound", err)
	}
	start := time.Now()
	r, err := env.Client.WatchFiles(ctx, sb.SandboxID, "/work", 500*time.Millisecond, 0)
	if err != nil || len(r.Events) != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("a quiet watch: %+v %v after %s", r, err, time.Since(start))
	}
}
