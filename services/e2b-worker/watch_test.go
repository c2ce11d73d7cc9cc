package e2bworker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestFilesWatch: files.watch on E2B is envd's WatchDir: files written
// through the files API (the fake reports only those) come back as events
// with absolute paths; a missing directory is FileNotFound.
func TestFilesWatch(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
	if err := b.WriteFile(ctx, r.SandboxID, "/home/user/w/.keep", 0o644, strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	rep, err := sbxtest.WatchWhile(t, ctx, env.Client, r.SandboxID, "/home/user/w", 10*time.Second, 20*time.Second, func(i int) error {
		return b.WriteFile(ctx, r.SandboxID, "/home/user/w/f"+strconv.Itoa(i+1), 0o644, strings.NewReader("x"), 1)
	})
	if err != nil || len(rep.Events) == 0 {
		t.Fatalf("watch: %+v %v", rep, err)
	}
	for _, ev := range rep.Events {
		if !strings.HasPrefix(ev.Path, "/home/user/w/f") {
			t.Errorf("event %+v: path not under the watched directory", ev)
		}
	}
	t.Logf("events: %+v", rep.Events)
	if _, err := env.Client.WatchFiles(ctx, r.SandboxID, "/home/user/nope", time.Second, 0); !errors.Is(err, events.ErrFileNotFound) {
		t.Errorf("watch of a missing directory: %v, want FileNotFound", err)
	}
}
