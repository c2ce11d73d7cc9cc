package workertest

import (
	"errors"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// durable probes pause, resume, snapshot and forks on backends that
// advertise pause and snapshot: files written before each pause are there
// after each resume (two cycles), a paused sandbox refuses an exec with
// SandboxPaused and answers a second pause with the same snapshot, a fork
// of a snapshot has the snapshot's files and not what was written after
// it. A backend that advertises neither refuses both with
// CapabilityNotSupported. Files go through the files API, so the probe
// needs no shell.
func (s *suite) durable(t *testing.T) {
	ctx := s.ctx(t)
	br, err := s.env.Client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pause, snapshot bool
	for _, b := range br.Backends {
		if len(b.Workers) > 0 {
			pause = pause || b.Capabilities.Has(events.CapPause)
			snapshot = snapshot || b.Capabilities.Has(events.CapSnapshot)
		}
	}
	id := s.create(t, ctx)
	if !pause && !snapshot {
		if _, err := s.env.Client.Pause(ctx, id); !errors.Is(err, events.ErrCapabilityNotSupported) {
			t.Errorf("pause on a backend without pause: %v, want CapabilityNotSupported", err)
		}
		if _, err := s.env.Client.Snapshot(ctx, id, ""); !errors.Is(err, events.ErrCapabilityNotSupported) {
			t.Errorf("snapshot on a backend without snapshot: %v, want CapabilityNotSupported", err)
		}
		return
	}
	write := func(id, path, data string) {
		t.Helper()
		if err := s.env.Client.WriteFile(ctx, id, path, []byte(data), 0o644); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	read := func(id, path, want string) {
		t.Helper()
		got, err := s.env.Client.ReadFile(ctx, id, path)
		if err != nil || string(got) != want {
			t.Fatalf("read %s in %s: %q %v, want %q", path, id, got, err, want)
		}
	}
	write(id, "durable-probe-1", "one")
	if snapshot {
		snap, err := s.env.Client.Snapshot(ctx, id, "probe")
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		write(id, "durable-probe-later", "after the snapshot")
		f, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS, FromSnapshot: snap.SnapshotID})
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		read(f.SandboxID, "durable-probe-1", "one")
		if _, err := s.env.Client.ReadFile(ctx, f.SandboxID, "durable-probe-later"); !errors.Is(err, events.ErrFileNotFound) {
			t.Errorf("the fork has a file written after its snapshot: %v", err)
		}
		_, _ = s.env.Client.Kill(ctx, f.SandboxID)
		if _, err := s.env.Client.DeleteSnapshot(ctx, snap.SnapshotID); err != nil {
			t.Errorf("delete the snapshot: %v", err)
		}
	}
	if !pause {
		return
	}
	for cycle, file := range []string{"durable-probe-2", "durable-probe-3"} {
		p, err := s.env.Client.Pause(ctx, id)
		if err != nil {
			t.Fatalf("cycle %d: pause: %v", cycle+1, err)
		}
		if again, err := s.env.Client.Pause(ctx, id); err != nil || !again.AlreadyPaused || again.SnapshotID != p.SnapshotID {
			t.Errorf("cycle %d: second pause: %+v %v", cycle+1, again, err)
		}
		if _, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Echo("x")}); !errors.Is(err, events.ErrSandboxPaused) {
			t.Errorf("cycle %d: exec on a paused sandbox: %v, want SandboxPaused", cycle+1, err)
		}
		if _, err := s.env.Client.Resume(ctx, id, 0); err != nil {
			t.Fatalf("cycle %d: resume: %v", cycle+1, err)
		}
		read(id, "durable-probe-1", "one")
		write(id, file, file)
	}
	read(id, "durable-probe-2", "durable-probe-2")
	read(id, "durable-probe-3", "durable-probe-3")
}
