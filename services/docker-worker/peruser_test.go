//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
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
	b := newTestBackend(t, Config{})
	if !b.ownsUID(shape{runtime: "runc"}, "1000:1000") {
		t.Skip("this worker keeps the image's uid (a writable root, no disk quota or --userns-remap): ADR 31")
	}
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
	if _, err := b.WatchFiles(wctx, victim, events.FilesWatchRequest{SandboxID: victim, Path: "/work", TimeoutMS: 200, MaxEvents: events.DefaultWatchEvents}); err != nil {
		t.Errorf("files.watch in sandbox B while A hoards inotify: %v", err)
	}
	if n := sh(t, b, victim, "python3 -c 'import ctypes; print(ctypes.CDLL(None).inotify_init1(0) >= 0)'"); n != "True" {
		t.Errorf("inotify_init in sandbox B while A hoards: %q, want True", n)
	}
}

// TestOwnUIDLooksNormal: a sandbox with a host uid of its own (ADR 31)
// still looks like the image's user from inside: whoami and id name it,
// HOME is its home, /work, the home and /tmp are writable by it and
// owned by it, and the files API writes files it owns. Two sandboxes'
// uids differ, and neither is the image's 1000.
func TestOwnUIDLooksNormal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"this host's disk quota", Config{}},
		// The image's /work and home, given to the uid before the start.
		{"writable root", Config{DiskQuota: DiskNone}},
		// No socket directory to mount a passwd from: it is copied in.
		{"writable root, attach stream", Config{DiskQuota: DiskNone, AgentChannel: ChannelAttach}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBackend(t, tc.cfg)
			if !b.ownsUID(shape{runtime: "runc"}, "1000:1000") {
				t.Skip("this worker keeps the image's uid: ADR 31")
			}
			ownUIDLooksNormal(t, b)
		})
	}
}

func ownUIDLooksNormal(t *testing.T, b *Backend) {
	ids := []string{mustCreate(t, b, withImage(pythonImage)), mustCreate(t, b, withImage(baseImage))}
	seen := map[string]bool{}
	for _, id := range ids {
		uid := sh(t, b, id, "id -u")
		if u, err := strconv.Atoi(uid); err != nil || u < ownUIDBase || u >= ownUIDBase+ownUIDRange {
			t.Errorf("%s: id -u = %q, want a uid of its own in [%d, %d)", id, uid, ownUIDBase, ownUIDBase+ownUIDRange)
		}
		if seen[uid] {
			t.Errorf("%s: uid %s is another sandbox's too", id, uid)
		}
		seen[uid] = true
		want := fmt.Sprintf("sandbox %s 1000 /home/sandbox %s %s %s ok", uid, uid, uid, uid)
		got := sh(t, b, id, `touch /work/a $HOME/b /tmp/c && echo "$(whoami) $(id -u) $(id -g) $HOME $(stat -c %u /work) $(stat -c %u $HOME) $(stat -c %u /tmp/c) ok"`)
		if got != want {
			t.Errorf("%s: whoami, ids, HOME and owners: %q, want %q", id, got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.WriteFile(ctx, id, "/work/sub/f.txt", 0o644, strings.NewReader("hi"), 2)
		cancel()
		if err != nil {
			t.Fatalf("%s: write file: %v", id, err)
		}
		if got := sh(t, b, id, "stat -c %u /work/sub/f.txt /work/sub && echo more >> /work/sub/f.txt && cat /work/sub/f.txt"); got != uid+"\n"+uid+"\nhimore" {
			t.Errorf("%s: a written file's and its directory's owner, then appended by the sandbox: %q, want %q", id, got, uid+"\n"+uid+"\nhimore")
		}
	}
}

// collidingIDs returns n sandbox ids whose container names hash to the
// same first uid (ADR 31's allocation starts there).
func collidingIDs(t *testing.T, n int) []string {
	t.Helper()
	byStart := map[uint32][]string{}
	prefix := randID("sb-")
	for i := range 1 << 22 {
		id := prefix + strconv.FormatInt(int64(i), 36)
		h := fnv.New32a()
		_, _ = h.Write([]byte(namePrefix + id))
		s := h.Sum32() % ownUIDRange
		if byStart[s] = append(byStart[s], id); len(byStart[s]) == n {
			return byStart[s]
		}
	}
	t.Fatalf("no %d ids hash alike", n)
	return nil
}

// TestOwnUIDsNeverShared: sandboxes whose names hash to the same uid still
// get distinct ones: two created at once by one worker (its creates under
// way), and a third by another worker of the host (which knows them only
// from the daemon's containers, as a restarted worker does).
func TestOwnUIDsNeverShared(t *testing.T) {
	t.Parallel()
	b1 := newTestBackend(t, Config{})
	if !b1.ownsUID(shape{runtime: "runc"}, "1000:1000") {
		t.Skip("this worker keeps the image's uid: ADR 31")
	}
	b2 := newTestBackend(t, Config{})
	ids := collidingIDs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, id := range ids[:2] {
		wg.Go(func() {
			_, errs[i] = b1.Create(ctx, newSpec(func(s *worker.CreateSpec) { s.SandboxID = id }))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, b2, func(s *worker.CreateSpec) { s.SandboxID = ids[2] })
	seen := map[string]string{}
	for i, id := range ids {
		b := b1
		if i == 2 {
			b = b2
		}
		uid := sh(t, b, id, "id -u")
		if other, ok := seen[uid]; ok {
			t.Errorf("sandboxes %s and %s share uid %s", other, id, uid)
		}
		seen[uid] = id
	}
}

// userOf is the uid a sandbox's processes run as, from its container's
// LabelUser: a uid of its own (ADR 31) or the image's 1000. Never root.
func userOf(t testing.TB, b *Backend, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ins, err := b.cli.ContainerInspect(ctx, b.lookupCached(id).containerID)
	if err != nil {
		t.Fatal(err)
	}
	u := uidOf(ins.Config.Labels[LabelUser])
	if u == "" || u == "0" {
		t.Fatalf("sandbox %s runs as %q", id, u)
	}
	return u
}
