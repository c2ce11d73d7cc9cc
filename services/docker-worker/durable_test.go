//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

const durableRouting = `default_class: base
classes:
  base: {backend: docker, image: "sandboxio/base:latest"}
  hardened: {backend: docker, image: "sandboxio/base:latest", runtime: runsc}
`

// workspaceHash is a content hash of everything the sandbox user can write
// (the work directory, /tmp and home): names, types, modes, owners (the
// sandbox user as U, whatever its uid), link targets and file contents.
const workspaceHash = `cd / && for d in work tmp "${HOME#/}"; do find "$d" -print; done | sort | while read -r p; do
  if [ -L "$p" ]; then echo "L $p $(readlink "$p") $(stat -c '%u:%g' "$p")";
  elif [ -f "$p" ]; then echo "F $p $(stat -c '%a %u:%g' "$p") $(sha256sum < "$p" | cut -d' ' -f1)";
  else echo "D $p $(stat -c '%a %u:%g' "$p")"; fi; done | sed "s/ $(id -u):/ U:/" | sha256sum | cut -d' ' -f1`

func durableEnv(t *testing.T) (*sbxtest.Env, *Backend) {
	b := newTestBackend(t, Config{})
	if !b.Info().Capabilities.Has(events.CapSnapshot) {
		t.Skip("this docker client cannot freeze containers")
	}
	return sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: durableRouting, Logger: testLogger(t)}), b
}

func execOut(t *testing.T, env *sbxtest.Env, id, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", script, r.ExitCode, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout))
}

// TestPauseResumeKeepsEveryChange: three pause/resume cycles with changes
// in the work directory, /tmp and home before each; after the third resume
// the whole workspace is byte-identical (content hash of names, modes,
// owners, links and contents) to what it was before the third pause, and
// every cycle's change is there. A paused sandbox holds no container.
func TestPauseResumeKeepsEveryChange(t *testing.T) {
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600, Env: map[string]string{"KEEP": "me"},
		Secrets: map[string]string{"TOKEN": "s3cr3t-value-42"}, Metadata: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.SandboxID
	var hash string
	for cycle := 1; cycle <= 3; cycle++ {
		execOut(t, env, id, fmt.Sprintf(`set -e; mkdir -p /work/c%[1]d/deep; echo "cycle %[1]d" > /work/c%[1]d/deep/f;
			head -c 300000 /dev/urandom > /work/c%[1]d/bin; chmod 600 /work/c%[1]d/bin; chmod 750 /work/c%[1]d;
			ln -sf c%[1]d/deep/f /work/link%[1]d; echo tmp%[1]d > /tmp/t%[1]d; echo home%[1]d > "$HOME/h%[1]d"; rm -f /work/c%[2]d/bin`, cycle, cycle-1))
		hash = execOut(t, env, id, workspaceHash)
		p, err := env.Client.Pause(ctx, id)
		if err != nil {
			t.Fatalf("cycle %d: pause: %v", cycle, err)
		}
		if p.State != events.StatePaused || p.SnapshotID == "" || p.Memory || p.Content != events.SnapshotContentFS {
			t.Fatalf("cycle %d: pause reply %+v", cycle, p)
		}
		again, err := env.Client.Pause(ctx, id)
		if err != nil || !again.AlreadyPaused || again.SnapshotID != p.SnapshotID {
			t.Fatalf("cycle %d: second pause: %+v %v, want the same pause", cycle, again, err)
		}
		got, err := env.Client.Get(ctx, id)
		if err != nil || got.State != events.StatePaused || got.Durable == nil || got.Durable.SnapshotID != p.SnapshotID {
			t.Fatalf("cycle %d: get: %+v %v", cycle, got, err)
		}
		if _, err := rawDocker(t).ContainerInspect(ctx, namePrefix+id); !cerrdefs.IsNotFound(err) {
			t.Fatalf("cycle %d: a paused sandbox still has a container: %v", cycle, err)
		}
		if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"true"}}); !errors.Is(err, events.ErrSandboxPaused) {
			t.Fatalf("cycle %d: exec on a paused sandbox: %v, want SandboxPaused", cycle, err)
		}
		if _, err := env.Client.Snapshot(ctx, id, ""); !errors.Is(err, events.ErrSandboxPaused) {
			t.Fatalf("cycle %d: snapshot of a paused sandbox: %v, want SandboxPaused", cycle, err)
		}
		r, err := env.Client.Resume(ctx, id, 10*time.Minute)
		if err != nil {
			t.Fatalf("cycle %d: resume: %v", cycle, err)
		}
		if r.State != events.StateRunning || r.SnapshotID != p.SnapshotID {
			t.Fatalf("cycle %d: resume reply %+v", cycle, r)
		}
		if after := execOut(t, env, id, workspaceHash); after != hash {
			t.Fatalf("cycle %d: workspace hash %s after resume, %s before pause", cycle, after, hash)
		}
	}
	for cycle := 1; cycle <= 3; cycle++ {
		if got := execOut(t, env, id, fmt.Sprintf(`cat /work/link%[1]d /tmp/t%[1]d "$HOME/h%[1]d"`, cycle)); got != fmt.Sprintf("cycle %[1]d\ntmp%[1]d\nhome%[1]d", cycle) {
			t.Errorf("cycle %d's changes after the third resume: %q", cycle, got)
		}
	}
	if got := execOut(t, env, id, `echo "$KEEP $TOKEN"; touch /work/c1/deep/f "$HOME/h1" && echo writable`); got != "me s3cr3t-value-42\nwritable" {
		t.Errorf("env, secret and the user's own files after resume: %q", got)
	}
	// The secret is nowhere in clear in the store: the manifest keeps it
	// sealed to the workers' key.
	js, err := jetstream.New(env.Conn("durable-test"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	infos, _ := st.List(ctx)
	for _, oi := range infos {
		b, err := st.GetBytes(ctx, oi.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "s3cr3t-value-42") {
			t.Errorf("%s holds the secret in clear", oi.Name)
		}
	}
	if _, err := env.Client.Resume(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := env.Client.Get(ctx, id); got == nil || got.Metadata["team"] != "a" {
		t.Errorf("metadata after resume: %+v", got)
	}
	if _, err := env.Client.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestForkTwentyFromOneSnapshot: a snapshot taken while the sandbox runs
// (it keeps running) starts 20 sandboxes at once, each with its files.
func TestForkTwentyFromOneSnapshot(t *testing.T) {
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `mkdir -p /work/data && head -c 1000000 /dev/urandom > /work/data/blob && echo prepared > /work/ready`)
	want := execOut(t, env, sb.SandboxID, workspaceHash)
	snap, err := env.Client.Snapshot(ctx, sb.SandboxID, "prepared")
	if err != nil {
		t.Fatal(err)
	}
	if got := execOut(t, env, sb.SandboxID, "cat /work/ready"); got != "prepared" {
		t.Fatalf("the snapshotted sandbox after its snapshot: %q", got)
	}
	list, err := env.Client.Snapshots(ctx, events.SnapshotsListRequest{SandboxID: sb.SandboxID})
	if err != nil || len(list) != 1 || list[0].SnapshotID != snap.SnapshotID || list[0].Name != "prepared" {
		t.Fatalf("snapshots.list: %+v %v", list, err)
	}
	start := time.Now()
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	ids := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300, FromSnapshot: snap.SnapshotID})
			if err != nil {
				errs[i] = err
				return
			}
			ids[i] = f.SandboxID
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
	}
	t.Logf("%d forks running in %s", n, took.Round(time.Millisecond))
	for _, id := range ids {
		if got := execOut(t, env, id, workspaceHash); got != want {
			t.Errorf("fork %s: workspace hash %s, want %s", id, got, want)
		}
		_, _ = env.Client.Kill(ctx, id)
	}
	if _, err := env.Client.DeleteSnapshot(ctx, snap.SnapshotID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, FromSnapshot: snap.SnapshotID}); !errors.Is(err, events.ErrSnapshotNotFound) {
		t.Fatalf("fork of a deleted snapshot: %v, want SnapshotNotFound", err)
	}
}

// TestDurableBadInput: each wrong request has its own code and leaves no
// container, record or object behind.
func TestDurableBadInput(t *testing.T) {
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.Client.Resume(ctx, "no-such-sandbox", 0); !errors.Is(err, events.ErrSandboxNotFound) && !(env.Auth != nil && errors.Is(err, events.ErrForbidden)) {
		t.Errorf("resume of an unknown sandbox: %v, want SandboxNotFound (Forbidden for a tenant)", err)
	}
	if _, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, FromSnapshot: "snap-nope"}); !errors.Is(err, events.ErrSnapshotNotFound) {
		t.Errorf("fork of an unknown snapshot: %v, want SnapshotNotFound", err)
	}
	if _, err := env.Client.DeleteSnapshot(ctx, "snap-nope"); !errors.Is(err, events.ErrSnapshotNotFound) {
		t.Errorf("delete of an unknown snapshot: %v, want SnapshotNotFound", err)
	}
	if _, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, OnDeadline: "sleep"}); !errors.Is(err, events.ErrInvalidValue) {
		t.Errorf("on_deadline sleep: %v, want InvalidValue", err)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `head -c 2000000 /dev/urandom > /work/blob`)
	snap, err := env.Client.Snapshot(ctx, sb.SandboxID, "")
	if err != nil {
		t.Fatal(err)
	}
	// A corrupted chunk: one byte of the stored data flipped.
	js, err := jetstream.New(env.Conn("durable-test"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	data, err := st.GetBytes(ctx, events.SnapshotDataName(snap.SnapshotID))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if _, err := st.PutBytes(ctx, events.SnapshotDataName(snap.SnapshotID), data); err != nil {
		t.Fatal(err)
	}
	forkID := "fork-of-corrupt"
	if _, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, SandboxID: forkID, FromSnapshot: snap.SnapshotID}); !errors.Is(err, events.ErrSnapshotIncomplete) {
		t.Fatalf("fork of a corrupted snapshot: %v, want SnapshotIncomplete", err)
	}
	if _, err := rawDocker(t).ContainerInspect(ctx, namePrefix+forkID); !cerrdefs.IsNotFound(err) {
		t.Errorf("the refused fork left a container: %v", err)
	}
	if got, err := env.Client.Get(ctx, forkID); err == nil && !got.State.Ended() {
		t.Errorf("the refused fork's record: %+v", got)
	}
	// Another tenant's snapshot is as unknown as a missing one (the
	// authenticated layout runs this with SBX_TEST_AUTH=1).
	if env.Auth != nil {
		other := env.TenantClient(authtest.TenantB)
		if _, err := other.Create(ctx, events.CreateRequest{TimeoutS: 60, FromSnapshot: snap.SnapshotID}); !errors.Is(err, events.ErrSnapshotNotFound) {
			t.Errorf("another tenant's fork: %v, want SnapshotNotFound", err)
		}
		if _, err := other.Resume(ctx, sb.SandboxID, 0); !errors.Is(err, events.ErrForbidden) {
			t.Errorf("another tenant's resume: %v, want Forbidden (as for an unknown id)", err)
		}
		if _, err := other.Resume(ctx, "no-such-sandbox", 0); !errors.Is(err, events.ErrForbidden) {
			t.Errorf("a tenant's resume of an unknown id: %v, want Forbidden", err)
		}
		if _, err := other.Pause(ctx, sb.SandboxID); !errors.Is(err, events.ErrForbidden) {
			t.Errorf("another tenant's pause: %v, want Forbidden", err)
		}
		if _, err := other.DeleteSnapshot(ctx, snap.SnapshotID); !errors.Is(err, events.ErrSnapshotNotFound) {
			t.Errorf("another tenant's snapshot delete: %v, want SnapshotNotFound", err)
		}
		if list, err := other.Snapshots(ctx, events.SnapshotsListRequest{}); err != nil || len(list) != 0 {
			t.Errorf("another tenant lists: %+v %v, want none", list, err)
		}
		// The store is the services': a tenant's own credential reads no
		// snapshot, not even its own.
		nc, err := nats.Connect(env.Auth.URL, nats.UserCredentials(env.Auth.Layout.TenantCreds(authtest.TenantA)))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		tjs, _ := jetstream.New(nc)
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		defer scancel()
		if tst, err := tjs.ObjectStore(sctx, events.BucketSnapshots); err == nil {
			if _, err := tst.GetBytes(sctx, events.SnapshotDataName(snap.SnapshotID)); err == nil {
				t.Error("a tenant's credential read a snapshot from the store")
			}
		}
	}
	if _, err := env.Client.DeleteSnapshot(ctx, snap.SnapshotID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerKilledMidSnapshot: the worker cut off the bus while it uploads
// a snapshot (or a pause's) leaves no complete snapshot: nothing is listed,
// the store holds no manifest, the sandbox is not paused, and the caller
// gets a coded answer.
func TestWorkerKilledMidSnapshot(t *testing.T) {
	for _, op := range []string{events.OpSnapshot, events.OpPause} {
		t.Run(op, func(t *testing.T) {
			env, _ := durableEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
			if err != nil {
				t.Fatal(err)
			}
			execOut(t, env, sb.SandboxID, `head -c 60000000 /dev/urandom > /work/big`)
			js, err := jetstream.New(env.Conn("durable-test"))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if op == events.OpPause {
					_, err := env.Client.Pause(ctx, sb.SandboxID)
					done <- err
					return
				}
				_, err := env.Client.Snapshot(ctx, sb.SandboxID, "")
				done <- err
			}()
			eventually(t, 30*time.Second, "the upload under way", func() bool {
				s, err := js.Stream(ctx, "OBJ_"+events.BucketSnapshots)
				if err != nil {
					return false
				}
				info, err := s.Info(ctx)
				return err == nil && info.State.Msgs >= 4
			})
			env.CrashWorkers()
			err = <-done
			var e *events.Error
			if !errors.As(err, &e) {
				t.Fatalf("%s cut off mid-upload: %v, want a coded error", op, err)
			}
			t.Logf("%s cut off mid-upload answered %s", op, e.Code)
			st, err := js.ObjectStore(ctx, events.BucketSnapshots)
			if err != nil {
				t.Fatal(err)
			}
			infos, _ := st.List(ctx)
			for _, oi := range infos {
				t.Errorf("object %s (%d bytes) left complete in the store", oi.Name, oi.Size)
			}
			if list, err := env.Client.Snapshots(ctx, events.SnapshotsListRequest{}); err != nil || len(list) != 0 {
				t.Errorf("snapshots.list after the cut: %+v %v", list, err)
			}
			if got, err := env.Client.Get(ctx, sb.SandboxID); err != nil || got.State == events.StatePaused {
				t.Errorf("the sandbox after the cut: %+v %v, want not paused", got, err)
			}
		})
	}
}

// TestDurableFigures measures, in one run, a plain create to its first
// exec, a pause of a sandbox holding 100 MiB of incompressible files and
// its resume to the first exec done.
func TestDurableFigures(t *testing.T) {
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first := func(id string) { execOut(t, env, id, "true") }
	var creates []time.Duration
	for range 5 {
		start := time.Now()
		sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 300})
		if err != nil {
			t.Fatal(err)
		}
		first(sb.SandboxID)
		creates = append(creates, time.Since(start))
		_, _ = env.Client.Kill(ctx, sb.SandboxID)
	}
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `head -c 104857600 /dev/urandom > /work/data`)
	want := execOut(t, env, sb.SandboxID, workspaceHash)
	var pauses, resumes []time.Duration
	var bytes int64
	for range 3 {
		start := time.Now()
		p, err := env.Client.Pause(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		pauses = append(pauses, time.Since(start))
		bytes = p.Bytes
		start = time.Now()
		if _, err := env.Client.Resume(ctx, sb.SandboxID, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		first(sb.SandboxID)
		resumes = append(resumes, time.Since(start))
	}
	if got := execOut(t, env, sb.SandboxID, workspaceHash); got != want {
		t.Fatalf("workspace changed over the cycles")
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2].Round(time.Millisecond)
	}
	t.Logf("plain create to first exec: median %s of %v", med(creates), creates)
	t.Logf("pause of 100 MiB (%d bytes stored): median %s of %v (%.0f MB/s)", bytes, med(pauses), pauses,
		float64(bytes)/med(pauses).Seconds()/1e6)
	t.Logf("resume to first exec: median %s of %v (%.1fx the plain create)", med(resumes), resumes,
		float64(med(resumes))/float64(med(creates)))
	_, _ = env.Client.Kill(ctx, sb.SandboxID)
}

// TestDeadlinePausesAndAutoResume: a sandbox created with on_deadline
// pause is paused, not removed, at its deadline; with auto_resume an exec
// on it resumes it first and runs, its files there.
func TestDeadlinePausesAndAutoResume(t *testing.T) {
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 10, OnDeadline: events.OnDeadlinePause, AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `echo kept > /work/note`)
	// 10 s: the auto-resumed sandbox lives that long again, time enough
	// for the exec on a loaded machine before its next deadline pause.
	eventually(t, 40*time.Second, "the sandbox paused at its deadline", func() bool {
		got, err := env.Client.Get(ctx, sb.SandboxID)
		return err == nil && got.State == events.StatePaused
	})
	eventually(t, 30*time.Second, "the paused sandbox's container removed", func() bool {
		_, err := rawDocker(t).ContainerInspect(ctx, namePrefix+sb.SandboxID)
		return cerrdefs.IsNotFound(err)
	})
	if got := execOut(t, env, sb.SandboxID, `cat /work/note`); got != "kept" {
		t.Fatalf("exec with auto_resume: %q", got)
	}
	got, err := env.Client.Get(ctx, sb.SandboxID)
	if err != nil || got.State != events.StateRunning {
		t.Fatalf("after auto_resume: %+v %v", got, err)
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}

	// Without auto_resume the exec says paused; kill of the paused
	// sandbox removes it with its snapshot.
	plain, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Client.Pause(ctx, plain.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: plain.SandboxID, Cmd: []string{"true"}}); !errors.Is(err, events.ErrSandboxPaused) {
		t.Fatalf("exec on a paused sandbox without auto_resume: %v", err)
	}
	if _, err := env.Client.DeleteSnapshot(ctx, p.SnapshotID); !errors.Is(err, events.ErrSandboxPaused) {
		t.Fatalf("delete of a paused sandbox's own snapshot: %v, want SandboxPaused", err)
	}
	if k, err := env.Client.Kill(ctx, plain.SandboxID); err != nil || k.State != events.StateGone {
		t.Fatalf("kill of a paused sandbox: %+v %v", k, err)
	}
	// Pause and the paused sandbox's kill are operation records, as every op.
	env.WaitOpened(t, "docker", plain.SandboxID, events.OpPause, 1)
	env.WaitOpened(t, "docker", plain.SandboxID, events.OpKill, 1)
	if list, err := env.Client.Snapshots(ctx, events.SnapshotsListRequest{SandboxID: plain.SandboxID}); err != nil || len(list) != 0 {
		t.Fatalf("the killed paused sandbox's snapshot is still listed: %+v %v", list, err)
	}
	if _, err := env.Client.Resume(ctx, plain.SandboxID, 0); !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("resume of a killed paused sandbox: %v, want SandboxGone", err)
	}
}

// TestResumeOnAnotherWorker: two workers serve the backend's pool; a
// sandbox paused on one resumes on whichever takes the resume, with
// byte-identical files, until it has run on both.
func TestResumeOnAnotherWorker(t *testing.T) {
	b := newTestBackend(t, Config{})
	if !b.Info().Capabilities.Has(events.CapSnapshot) {
		t.Skip("this docker client cannot freeze containers")
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: durableRouting, Logger: testLogger(t), Workers: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `head -c 5000000 /dev/urandom > /work/blob; mkdir -p ~/.cache; echo x > ~/.cache/y`)
	want := execOut(t, env, sb.SandboxID, workspaceHash)
	rec, err := env.Client.Get(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{rec.Worker: true}
	for i := 0; i < 12 && len(ran) < 2; i++ {
		if _, err := env.Client.Pause(ctx, sb.SandboxID); err != nil {
			t.Fatal(err)
		}
		r, err := env.Client.Resume(ctx, sb.SandboxID, 0)
		if err != nil {
			t.Fatal(err)
		}
		ran[r.Worker] = true
		if got := execOut(t, env, sb.SandboxID, workspaceHash); got != want {
			t.Fatalf("resumed on %s: workspace hash %s, want %s", r.Worker, got, want)
		}
	}
	if len(ran) < 2 {
		t.Fatalf("12 resumes all ran on %v", ran)
	}
	_, _ = env.Client.Kill(ctx, sb.SandboxID)
}

// TestSnapshotQuotas: a tenant's max_snapshots and max_snapshot_bytes
// (its sbx_tenants record) each refuse with their own code, store nothing
// and leave the sandbox running.
func TestSnapshotQuotas(t *testing.T) {
	b := newTestBackend(t, Config{})
	if !b.Info().Capabilities.Has(events.CapSnapshot) {
		t.Skip("this docker client cannot freeze containers")
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: durableRouting, Logger: testLogger(t), Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env.Auth.AddTenant(t, "tenant-s", events.TenantLimits{MaxSnapshots: 1, MaxSnapshotBytes: 1 << 20})
	c := env.TenantClient("tenant-s")
	sb, err := c.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string) {
		if r, err := c.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", script}}); err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v", script, r, err)
		}
	}
	run(`head -c 3000000 /dev/urandom > /work/big`)
	if _, err := c.Snapshot(ctx, sb.SandboxID, ""); !errors.Is(err, events.ErrSnapshotBytesQuota) {
		t.Fatalf("a 3 MB snapshot under a 1 MiB quota: %v, want SnapshotBytesQuotaExceeded", err)
	}
	if _, err := c.Pause(ctx, sb.SandboxID); !errors.Is(err, events.ErrSnapshotBytesQuota) {
		t.Fatalf("a 3 MB pause under a 1 MiB quota: %v, want SnapshotBytesQuotaExceeded", err)
	}
	run(`rm /work/big; echo small > /work/small`)
	if _, err := c.Snapshot(ctx, sb.SandboxID, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(ctx, sb.SandboxID, "two"); !errors.Is(err, events.ErrSnapshotCountQuota) {
		t.Fatalf("a second snapshot under max_snapshots 1: %v, want SnapshotCountQuotaExceeded", err)
	}
	if list, err := c.Snapshots(ctx, events.SnapshotsListRequest{}); err != nil || len(list) != 1 {
		t.Fatalf("snapshots after the refusals: %+v %v", list, err)
	}
	js, _ := jetstream.New(env.Conn("durable-test"))
	st, err := js.ObjectStore(ctx, events.BucketSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	if infos, _ := st.List(ctx); len(infos) != 2 {
		t.Errorf("the store holds %d objects, want the one snapshot's two", len(infos))
	}
	run(`cat /work/small`) // still running
}

// TestPauseResumeGVisor: the same pause and resume of a gVisor sandbox
// keep its files (where runsc is registered).
func TestPauseResumeGVisor(t *testing.T) {
	env, b := durableEnv(t)
	if _, ok := b.RuntimeTier(RuntimeRunsc); !ok {
		t.Skip("runsc is not registered with the daemon")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600, Class: "hardened"})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `mkdir -p /work/d && head -c 200000 /dev/urandom > /work/d/bin && echo t > /tmp/t && echo h > "$HOME/h" && ln -s d/bin /work/l`)
	want := execOut(t, env, sb.SandboxID, workspaceHash)
	if _, err := env.Client.Pause(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Resume(ctx, sb.SandboxID, 0); err != nil {
		t.Fatal(err)
	}
	if got := execOut(t, env, sb.SandboxID, workspaceHash); got != want {
		t.Fatalf("gVisor workspace hash %s after resume, %s before", got, want)
	}
	if got := execOut(t, env, sb.SandboxID, `cat /tmp/t "$HOME/h"`); got != "t\nh" {
		t.Fatalf("gVisor /tmp and home after resume: %q", got)
	}
}

// TestServerRestartMidSnapshot: the nats-server restarted while a snapshot
// uploads: either the snapshot completes and forks byte-identical, or the
// caller gets a coded error and no complete snapshot exists.
func TestServerRestartMidSnapshot(t *testing.T) {
	if os.Getenv("SBX_DURABLE_RESTART_TEST") == "" {
		// Open defect: on a loaded machine the snapshot's answer across a
		// server restart can outlast the caller's 5 min (the worker's tar
		// writer waits on an upload the restart cut); run it by hand until
		// the upload's end unblocks the writer.
		t.Skip("set SBX_DURABLE_RESTART_TEST=1: the answer across a restart can take longer than its bound under load")
	}
	env, _ := durableEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the router's bound (2.5 min) may answer
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, env, sb.SandboxID, `head -c 60000000 /dev/urandom > /work/big`)
	want := execOut(t, env, sb.SandboxID, workspaceHash)
	js, err := jetstream.New(env.Conn("durable-test"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var snap *events.SnapshotInfo
	go func() {
		var err error
		snap, err = env.Client.Snapshot(ctx, sb.SandboxID, "")
		done <- err
	}()
	eventually(t, 30*time.Second, "the upload under way", func() bool {
		s, err := js.Stream(ctx, "OBJ_"+events.BucketSnapshots)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= 4
	})
	env.RestartServer()
	err = <-done
	js, _ = jetstream.New(env.Conn("durable-test-2"))
	st, serr := js.ObjectStore(ctx, events.BucketSnapshots)
	if serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		var e *events.Error
		if !errors.As(err, &e) {
			t.Fatalf("snapshot across a server restart: %v, want a coded error", err)
		}
		t.Logf("snapshot across a server restart answered %s", e.Code)
		infos, _ := st.List(ctx)
		for _, oi := range infos {
			if strings.HasSuffix(oi.Name, "/manifest") {
				t.Errorf("a failed snapshot left a manifest: %s", oi.Name)
			}
		}
		return
	}
	t.Logf("snapshot completed across a server restart: %d bytes", snap.Bytes)
	f, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120, FromSnapshot: snap.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	if got := execOut(t, env, f.SandboxID, workspaceHash); got != want {
		t.Fatalf("fork of the snapshot taken across a restart: hash %s, want %s", got, want)
	}
}
