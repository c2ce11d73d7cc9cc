//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

func TestKillIdempotentAndList(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	spec1, spec2 := newSpec(), newSpec()
	for _, s := range []worker.CreateSpec{spec1, spec2} {
		if _, err := b.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Create(ctx, spec1); !errors.Is(err, events.ErrSandboxExists) {
		t.Errorf("second create of one id: %v", err)
	}
	list, err := b.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]worker.Listed{}
	for _, l := range list {
		ids[l.SandboxID] = l
	}
	for _, s := range []worker.CreateSpec{spec1, spec2} {
		l, ok := ids[s.SandboxID]
		if !ok || !l.Deadline.Equal(s.Deadline) || l.WorkerID != b.cfg.WorkerID || l.CreatedAt.IsZero() {
			t.Errorf("listed %+v for %s (deadline %v)", l, s.SandboxID, s.Deadline)
		}
	}
	if len(list) != 2 {
		t.Errorf("listed %d sandboxes, want 2: %+v", len(list), list)
	}

	// A second backend (a restarted worker) finds the sandbox by its name.
	b2 := newTestBackend(t, Config{WorkerID: b.cfg.WorkerID})
	if got := sh(t, b2, spec1.SandboxID, "echo adopted"); got != "adopted" {
		t.Errorf("exec after restart: %q", got)
	}

	for i := 0; i < 3; i++ {
		if err := b.Kill(ctx, spec1.SandboxID); err != nil {
			t.Fatalf("kill #%d: %v", i+1, err)
		}
	}
	if _, err := b.cli.ContainerInspect(ctx, namePrefix+spec1.SandboxID); !cerrdefs.IsNotFound(err) {
		t.Errorf("container still there after kill: %v", err)
	}
	if err := b.Kill(ctx, "never-existed"); err != nil {
		t.Errorf("kill of an unknown sandbox: %v", err)
	}
	if _, err := b.Exec(ctx, spec1.SandboxID, worker.Process{Cmd: []string{"true"}}); !errors.Is(err, events.ErrSandboxGone) {
		t.Errorf("exec after kill: %v", err)
	}
	list, _ = b.ListSandboxes(ctx)
	if len(list) != 1 || list[0].SandboxID != spec2.SandboxID {
		t.Errorf("after kill: %+v", list)
	}
}

func TestKillDuringExec(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), id, worker.Process{Cmd: []string{"sleep", "1000"}})
		done <- err
	}()
	eventually(t, 10*time.Second, "sleep running", func() bool {
		return sh(t, b, id, "ps -o args | grep -c '[s]leep 1000' || true") == "1"
	})
	if err := b.Kill(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Errorf("exec in a killed sandbox: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end when its sandbox was killed")
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	ctx := context.Background()

	data := make([]byte, 1<<20+17)
	_, _ = rand.Read(data)
	small := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	for _, tc := range []struct {
		path, readAs string
		data         []byte
		mode         uint32
	}{
		{"/work/a.bin", "/work/a.bin", data, 0o644},
		{"rel/dir/b.bin", "/work/rel/dir/b.bin", small, 0o755},
		{"/tmp/c", "/tmp/c", nil, 0o600},
	} {
		if err := b.WriteFile(ctx, id, tc.path, tc.mode, bytes.NewReader(tc.data), int64(len(tc.data))); err != nil {
			t.Fatalf("write %s: %v", tc.path, err)
		}
		var got bytes.Buffer
		n, err := b.ReadFile(ctx, id, tc.readAs, &got)
		if err != nil || n != int64(len(tc.data)) || !bytes.Equal(got.Bytes(), tc.data) {
			t.Errorf("read %s: %d bytes, err %v, equal %t", tc.readAs, n, err, bytes.Equal(got.Bytes(), tc.data))
		}
		// The sandbox's user owns what it was given, with the mode asked.
		if got := sh(t, b, id, "stat -c '%u %a' "+tc.readAs); got != userOf(t, b, id)+" "+strings.TrimPrefix(strings.TrimPrefix(octal(tc.mode), "0"), "o") {
			t.Errorf("%s: owner and mode %q", tc.readAs, got)
		}
	}
	// Unknown size: read until EOF.
	if err := b.WriteFile(ctx, id, "/work/stream.txt", 0, strings.NewReader("streamed"), -1); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, b, id, "cat /work/stream.txt"); got != "streamed" {
		t.Errorf("got %q", got)
	}
	// Overwrite.
	if err := b.WriteFile(ctx, id, "/work/stream.txt", 0, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, b, id, "cat /work/stream.txt"); got != "x" {
		t.Errorf("got %q", got)
	}

	entries, err := b.ListFiles(ctx, id, "/work")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		if e.Name == "a.bin" && (e.Size != int64(len(data)) || e.IsDir || e.Path != "/work/a.bin") {
			t.Errorf("entry %+v", e)
		}
		if e.Name == "rel" && !e.IsDir {
			t.Errorf("entry %+v", e)
		}
	}
	slices.Sort(names)
	if want := []string{"a.bin", "blob", "rel", "stream.txt"}; !slices.Equal(names, want) && !slices.Equal(names, []string{"a.bin", "rel", "stream.txt"}) {
		t.Errorf("list /work: %v", names)
	}
	one, err := b.ListFiles(ctx, id, "/work/a.bin")
	if err != nil || len(one) != 1 || one[0].Size != int64(len(data)) {
		t.Errorf("list of a file: %+v %v", one, err)
	}

	// Escapes are refused; links inside the sandbox are followed.
	sh(t, b, id, "ln -s /proc/self/root /work/esc && ln -s /proc /work/p && ln -s ../sys /work/s && ln -s /work/rel /work/inside && ln -s /dev/zero /work/z")
	for _, p := range []string{"/work/esc/etc/passwd", "/work/p/1/environ", "/work/s/kernel", "/proc/1/environ", "/dev/null", "/work/../etc/passwd", "../etc/passwd", "/work/z"} {
		if _, err := b.ReadFile(ctx, id, p, io.Discard); !errors.Is(err, events.ErrForbidden) && !errors.Is(err, events.ErrInvalidValue) {
			t.Errorf("read %s: %v, want refused", p, err)
		}
		if err := b.WriteFile(ctx, id, p, 0o644, strings.NewReader("x"), 1); !errors.Is(err, events.ErrForbidden) && !errors.Is(err, events.ErrInvalidValue) &&
			!errors.Is(err, events.ErrPathIsSymlink) {
			t.Errorf("write %s: %v, want refused", p, err)
		}
	}
	var got bytes.Buffer
	if _, err := b.ReadFile(ctx, id, "/work/inside/dir/b.bin", &got); err != nil || !bytes.Equal(got.Bytes(), small) {
		t.Errorf("read through an inside link: %v", err)
	}
	if _, err := b.ReadFile(ctx, id, "/work/nope", io.Discard); !errors.Is(err, events.ErrFileNotFound) {
		t.Errorf("read of a missing file: %v", err)
	}
	if _, err := b.ReadFile(ctx, id, "/work", io.Discard); !errors.Is(err, events.ErrInvalidValue) {
		t.Errorf("read of a directory: %v", err)
	}
}

func octal(m uint32) string {
	const digits = "01234567"
	s := ""
	for i := 0; i < 3; i++ {
		s = string(digits[m&7]) + s
		m >>= 3
	}
	return strings.TrimLeft(s, "0")
}

func TestWarmPool(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{Pools: []PoolConfig{{Class: "base", Image: baseImage, Size: 2}}})
	ctx := context.Background()
	eventually(t, 30*time.Second, "pool filled", func() bool { return b.PoolIdle()["base"] == 2 })

	seen := map[string]bool{}
	var ids []string
	for i := 0; i < 4; i++ {
		spec := newSpec(func(s *worker.CreateSpec) { s.Env = map[string]string{"GREETING": "hi"} })
		start := time.Now()
		if _, err := b.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		sb := b.lookupCached(spec.SandboxID)
		t.Logf("create %d: from pool %t in %s", i, sb.fromPool, d)
		if seen[sb.containerID] {
			t.Fatalf("container %s handed out twice", sb.containerID)
		}
		seen[sb.containerID] = true
		ids = append(ids, spec.SandboxID)
		if got := sh(t, b, spec.SandboxID, "echo $GREETING; id -u"); got != "hi\n"+userOf(t, b, spec.SandboxID) {
			t.Errorf("pool sandbox env/user: %q", got)
		}
		if i == 0 && !sb.fromPool {
			t.Errorf("first create did not come from the full pool")
		}
		eventually(t, 30*time.Second, "pool refilled", func() bool { return b.PoolIdle()["base"] == 2 })
	}
	// Adopted members are listed under their sandbox ids, idle ones not at all.
	list, err := b.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, l := range list {
		listed = append(listed, l.SandboxID)
		if l.Deadline.IsZero() {
			t.Errorf("adopted sandbox %s listed without deadline", l.SandboxID)
		}
	}
	slices.Sort(listed)
	slices.Sort(ids)
	if !slices.Equal(listed, ids) {
		t.Errorf("listed %v, want %v", listed, ids)
	}
	// A create that does not match (network allowed) goes cold.
	spec := newSpec(withNetwork(events.NetworkPolicy{Egress: events.EgressAllow}))
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if b.lookupCached(spec.SandboxID).fromPool {
		t.Errorf("a non-matching create took a pool member")
	}
	if err := b.Kill(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
}

func TestOverloaded(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{MaxConcurrentCreates: 1, MaxConcurrentExecs: 1, QueueWait: 50 * time.Millisecond})
	ctx := context.Background()
	id := mustCreate(t, b)

	if err := b.createSem.acquire(ctx, time.Second, "creates"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Create(ctx, newSpec())
	b.createSem.release()
	if !errors.Is(err, events.ErrOverloaded) || !events.AsError(err).Retryable {
		t.Errorf("create at the limit: %v", err)
	}

	// One exec runs; a second waits its turn, then is refused.
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = b.Exec(ctx, id, worker.Process{Cmd: []string{"sh", "-c", "echo go; sleep 2"}, Stdout: closeOnWrite(started)})
	}()
	<-started
	_, err = b.Exec(ctx, id, worker.Process{Cmd: []string{"true"}})
	if !errors.Is(err, events.ErrOverloaded) {
		t.Errorf("exec at the limit: %v", err)
	}
	wg.Wait()
	if got := sh(t, b, id, "echo free"); got != "free" {
		t.Errorf("after the burst: %q", got)
	}
}

type closeOnWriteW struct {
	once sync.Once
	ch   chan struct{}
}

func closeOnWrite(ch chan struct{}) io.Writer { return &closeOnWriteW{ch: ch} }
func (c *closeOnWriteW) Write(p []byte) (int, error) {
	c.once.Do(func() { close(c.ch) })
	return len(p), nil
}

// TestSecretsSurviveWorkerRestart: a backend restarted with the same worker
// id gives a re-adopted sandbox its secrets back, from the container's
// root-only tmpfs, and never from its config or labels.
func TestSecretsSurviveWorkerRestart(t *testing.T) {
	t.Parallel()
	workerID := randID("restart-")
	first := newTestBackend(t, Config{WorkerID: workerID})
	spec := newSpec()
	spec.Secrets = map[string]string{"API_TOKEN": "s3cr3t-value-42"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := first.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Kill(context.Background(), spec.SandboxID) })
	cid := first.lookupCached(spec.SandboxID).containerID
	inspect, err := first.cli.ContainerInspect(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(inspect); strings.Contains(string(raw), "s3cr3t-value-42") {
		t.Fatal("the secret is visible in docker inspect")
	}
	// The save happens in the background; a second backend (the restarted
	// worker) must eventually find it.
	var second *Backend
	eventually(t, 30*time.Second, "the secret restored", func() bool {
		second = newTestBackend(t, Config{WorkerID: workerID})
		values, known := second.SecretValues(ctx, spec.SandboxID)
		return known && slices.Contains(values, "s3cr3t-value-42")
	})
	var out bytes.Buffer
	st, err := second.Exec(ctx, spec.SandboxID, worker.Process{Cmd: []string{"sh", "-c", "printf %s \"$API_TOKEN\""}, Stdout: &out})
	if err != nil || st.Code != 0 || out.String() != "s3cr3t-value-42" {
		t.Fatalf("exec after restart: %q %+v %v", out.String(), st, err)
	}
	// The sandbox user cannot read the saved file.
	out.Reset()
	st, _ = second.Exec(ctx, spec.SandboxID, worker.Process{Cmd: []string{"cat", "/run/sandboxio/env.json"}, Stdout: &out, Stderr: io.Discard})
	if st.Code == 0 || out.Len() > 0 {
		t.Fatalf("uid 1000 read the saved env: %q", out.String())
	}
}
