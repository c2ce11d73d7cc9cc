package modalworker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	modalworker "github.com/sandboxio/sandboxio/services/modal-worker"
	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// create makes a sandbox through the backend directly and kills it at
// cleanup.
func create(t *testing.T, b *modalworker.Backend, mod func(*worker.CreateSpec)) (string, modalfake.SandboxInfo) {
	t.Helper()
	spec := worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Owner: "alice", Spec: events.ClassSpec{Name: "modal", Backend: "modal"},
		Deadline: time.Now().Add(10 * time.Minute)}
	if mod != nil {
		mod(&spec)
	}
	ctx := ctxT(t, 30*time.Second)
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Kill(context.Background(), spec.SandboxID); err != nil {
			t.Errorf("kill at cleanup: %v", err)
		}
	})
	return spec.SandboxID, sandboxOf(t, b, spec.SandboxID)
}

var fakes = map[*modalworker.Backend]*modalfake.Server{}

func workerID(b *modalworker.Backend) string { return backendWorker[b] }

var backendWorker = map[*modalworker.Backend]string{}

func sandboxOf(t *testing.T, b *modalworker.Backend, id string) modalfake.SandboxInfo {
	t.Helper()
	mid, ok := b.ModalSandboxID(id)
	if !ok {
		t.Fatalf("backend does not know sandbox %s", id)
	}
	info, ok := fakes[b].Sandbox(mid)
	if !ok {
		t.Fatalf("fake does not know %s", mid)
	}
	return info
}

// setup starts a fake and a backend registered for the helpers above.
func setup(t *testing.T, opts modalfake.Options, mod func(*modalworker.Config)) (*modalfake.Server, *modalworker.Backend) {
	t.Helper()
	srv := startFake(t, opts)
	var wid string
	b := newBackend(t, srv, func(c *modalworker.Config) {
		if mod != nil {
			mod(c)
		}
		wid = c.WorkerID
	})
	fakes[b] = srv
	backendWorker[b] = wid
	t.Cleanup(func() { delete(fakes, b); delete(backendWorker, b) })
	return srv, b
}

// run execs argv and returns stdout, stderr and the exit status.
func run(t *testing.T, b *modalworker.Backend, id string, p worker.Process) (string, string, worker.ExitStatus, error) {
	t.Helper()
	var out, errb bytes.Buffer
	if p.ID == "" {
		p.ID = events.NewID()
	}
	p.Stdout, p.Stderr = &out, &errb
	st, err := b.Exec(ctxT(t, 60*time.Second), id, p)
	return out.String(), errb.String(), st, err
}

func TestCreateMapsTheRequest(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	tests := []struct {
		name  string
		spec  func(*worker.CreateSpec)
		check func(t *testing.T, info modalfake.SandboxInfo)
	}{
		{"deny network is BLOCKED", nil, func(t *testing.T, info modalfake.SandboxInfo) {
			if info.Network.GetNetworkAccessType() != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_BLOCKED {
				t.Fatalf("network %v", info.Network)
			}
		}},
		{"allow is OPEN", func(s *worker.CreateSpec) { s.Network = events.NetworkPolicy{Egress: events.EgressAllow} }, func(t *testing.T, info modalfake.SandboxInfo) {
			if info.Network.GetNetworkAccessType() != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_OPEN {
				t.Fatalf("network %v", info.Network)
			}
		}},
		{"allowlist splits CIDRs and domains", func(s *worker.CreateSpec) {
			s.Network = events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"10.0.0.0/8", "1.2.3.4", "pypi.org"}}
		}, func(t *testing.T, info modalfake.SandboxInfo) {
			n := info.Network
			if n.GetNetworkAccessType() != pb.NetworkAccessType_NETWORK_ACCESS_TYPE_ALLOWLIST ||
				!slices.Equal(n.GetAllowedCidrs(), []string{"10.0.0.0/8", "1.2.3.4/32"}) || !slices.Equal(n.GetAllowedDomains(), []string{"pypi.org"}) {
				t.Fatalf("network %v", n)
			}
		}},
		{"full lifetime and tags", func(s *worker.CreateSpec) { s.Deadline = time.Now().Add(2 * time.Hour) }, func(t *testing.T, info modalfake.SandboxInfo) {
			if info.TimeoutSecs < 7199 || info.TimeoutSecs > 7201 {
				t.Fatalf("timeout_secs %d, want the full 2 h", info.TimeoutSecs)
			}
			for _, k := range []string{modalworker.TagSandbox, modalworker.TagWorker, modalworker.TagDeadline, modalworker.TagOwner, modalworker.TagClass} {
				if info.Tags[k] == "" {
					t.Fatalf("tag %s missing: %v", k, info.Tags)
				}
			}
		}},
		{"resources", func(s *worker.CreateSpec) { s.Resources = events.Resources{CPUs: 2, MemoryMB: 1024} }, func(t *testing.T, info modalfake.SandboxInfo) {
			r := info.Resources
			if r.GetMilliCpu() != 1000 || r.GetMemoryMb() != 1024 || r.GetEphemeralDiskMb() != 0 {
				t.Fatalf("resources %v", r)
			}
		}},
		{"env and secrets as one ephemeral secret, never in tags", func(s *worker.CreateSpec) {
			s.Env = map[string]string{"PLAIN": "p"}
			s.Secrets = map[string]string{"API_TOKEN": "s3cr3t-value"}
		}, func(t *testing.T, info modalfake.SandboxInfo) {
			if !slices.Equal(info.SecretKeys, []string{"API_TOKEN", "PLAIN"}) {
				t.Fatalf("secret keys %v", info.SecretKeys)
			}
			for k, v := range info.Tags {
				if strings.Contains(k+v, "s3cr3t") {
					t.Fatalf("secret in tag %s=%s", k, v)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, info := create(t, b, tc.spec)
			tc.check(t, info)
		})
	}
}

func TestCreateRefusesMoreThanADay(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	_, err := b.Create(ctxT(t, 10*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(25 * time.Hour)})
	if !errors.Is(err, events.ErrInvalidValue) {
		t.Fatalf("create for 25 h: %v, want InvalidValue", err)
	}
}

func TestImageBuildFailureIsImageNotFound(t *testing.T) {
	_, b := setup(t, modalfake.Options{DeferBuilds: true}, nil)
	_, err := b.Create(ctxT(t, 10*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b),
		Spec: events.ClassSpec{Image: "example.com/does-not-exist:1"}, Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, events.ErrImageNotFound) {
		t.Fatalf("create: %v, want ImageNotFound", err)
	}
	// A deferred build is joined through ImageJoinStreaming.
	id, _ := create(t, b, nil)
	if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"echo", "built"}}); err != nil || out != "built\n" {
		t.Fatalf("exec: %q, %v", out, err)
	}
}

func TestExecEnvSecretsCwd(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, func(s *worker.CreateSpec) {
		s.Env = map[string]string{"FROM_CREATE": "c"}
		s.Secrets = map[string]string{"TOKEN": "tok"}
	})
	tests := []struct {
		name string
		p    worker.Process
		out  string
		code int
	}{
		{"create env and secrets reach execs", worker.Process{Cmd: []string{"sh", "-c", `printf '%s %s' "$FROM_CREATE" "$TOKEN"`}}, "c tok", 0},
		{"exec env wins", worker.Process{Cmd: []string{"sh", "-c", `printf %s "$FROM_CREATE"`}, Env: map[string]string{"FROM_CREATE": "e"}}, "e", 0},
		{"cwd", worker.Process{Cmd: pwdProbe, Cwd: "/tmp"}, "/tmp\n", 0},
		{"exit code", worker.Process{Cmd: []string{"sh", "-c", "exit 9"}}, "", 9},
		{"missing command exits 127", worker.Process{Cmd: []string{"/no/such/binary"}}, "", 127},
		{"stdin", worker.Process{Cmd: []string{"cat"}, Stdin: strings.NewReader("in\x00put")}, "in\x00put", 0},
		{"killed by a signal", worker.Process{Cmd: []string{"sh", "-c", "kill -TERM $$"}}, "", 143},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, st, err := run(t, b, id, tc.p)
			if err != nil || out != tc.out || st.Code != tc.code {
				t.Fatalf("got %q %+v %v, want %q exit %d", out, st, err, tc.out, tc.code)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	ctx := ctxT(t, time.Minute)
	data := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 KB: several stdin chunks
	if err := b.WriteFile(ctx, id, "/work/dir/data.bin", 0o644, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	shared := jailed(t)
	// Processes see the files the API wrote...
	if !shared {
	} else if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "wc -c < /work/dir/data.bin"}}); err != nil || strings.TrimSpace(out) != fmt.Sprint(len(data)) {
		t.Fatalf("wc: %q, %v", out, err)
	}
	// ...and the API sees what processes wrote.
	var got bytes.Buffer
	if shared {
		if _, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "printf made-by-sh > /tmp/x.txt"}}); err != nil {
			t.Fatal(err)
		}
		if n, err := b.ReadFile(ctx, id, "/tmp/x.txt", &got); err != nil || n != 10 || got.String() != "made-by-sh" {
			t.Fatalf("read: %d %q %v", n, got.String(), err)
		}
		got.Reset()
	}
	if _, err := b.ReadFile(ctx, id, "/work/dir/data.bin", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back %d bytes, %v", got.Len(), err)
	}
	mode := uint32(0o755) // applied with chmod, a process: needs the jail
	if !shared {
		mode = 0o644
	}
	if err := b.WriteFile(ctx, id, "/work/run.sh", mode, strings.NewReader("#!/bin/sh\necho ran\n"), -1); err != nil {
		t.Fatal(err)
	}
	if !shared {
	} else if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"/work/run.sh"}}); err != nil || out != "ran\n" {
		t.Fatalf("a 0755 file is executable: %q, %v", out, err)
	}
	list, err := b.ListFiles(ctx, id, "/work")
	if err != nil || len(list) != 2 || list[0].Name != "dir" || !list[0].IsDir || list[1].Name != "run.sh" || list[1].Mode != mode {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if list, err := b.ListFiles(ctx, id, "/work/dir/data.bin"); err != nil || len(list) != 1 || list[0].Size != int64(len(data)) {
		t.Fatalf("list of a file: %+v, %v", list, err)
	}
	errTests := []struct {
		name string
		f    func() error
		want error
	}{
		{"read missing", func() error { _, err := b.ReadFile(ctx, id, "/nope", &bytes.Buffer{}); return err }, events.ErrFileNotFound},
		{"list missing", func() error { _, err := b.ListFiles(ctx, id, "/nope"); return err }, events.ErrFileNotFound},
		{"read a directory", func() error { _, err := b.ReadFile(ctx, id, "/work", &bytes.Buffer{}); return err }, events.ErrInvalidValue},
		{"escape through ..", func() error { // stays in the sandbox, where there is no such file
			_, err := b.ReadFile(ctx, id, "/../../../etc/hostname-nope", &bytes.Buffer{})
			return err
		}, events.ErrFileNotFound},
		{"unknown sandbox", func() error { _, err := b.ListFiles(ctx, "nosuch", "/"); return err }, events.ErrSandboxGone},
	}
	for _, tc := range errTests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.f(); !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestCapabilities declares what the Modal backend does not do, through the
// whole stack: no set_timeout, no signals but KILL.
func TestCapabilities(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, nil)
	info := b.Info()
	if info.Isolation != events.TierGVisor || info.Name != "modal" {
		t.Fatalf("info %+v", info)
	}
	for _, c := range []events.Capability{events.CapSetTimeout, events.CapSignal, events.CapRunCode, events.CapPause} {
		if slices.Contains(info.Capabilities, c) {
			t.Fatalf("advertises %s", c)
		}
	}
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Client.Kill(context.Background(), r.SandboxID)
	if _, err := env.Client.SetTimeout(ctx, r.SandboxID, time.Hour); !errors.Is(err, events.ErrCapabilityNotSupported) {
		t.Fatalf("set_timeout: %v, want CapabilityNotSupported", err)
	}
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		return !errors.Is(env.Client.SendStdin(ctx, r.SandboxID, p.ProcessID, nil, false), events.ErrProcessNotFound)
	}, "process never started")
	if err := env.Client.Signal(ctx, r.SandboxID, p.ProcessID, "TERM"); !errors.Is(err, events.ErrCapabilityNotSupported) {
		t.Fatalf("TERM: %v, want CapabilityNotSupported", err)
	}
	if err := env.Client.Signal(ctx, r.SandboxID, p.ProcessID, "KILL"); err != nil {
		t.Fatalf("KILL: %v", err)
	}
	res, err := p.Wait()
	if err != nil || res.Signal != "KILL" {
		t.Fatalf("after KILL: %+v, %v", res, err)
	}
}

// TestReconcileAndAdopt: a second backend with the same worker id (a
// restart) lists the first one's sandboxes by tag, adopts one to exec in
// it, and kills one it never created.
func TestReconcileAndAdopt(t *testing.T) {
	srv, b := setup(t, modalfake.Options{PageSize: 2}, nil)
	ids := map[string]bool{}
	for i := 0; i < 5; i++ {
		spec := worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(10 * time.Minute)}
		if _, err := b.Create(ctxT(t, 30*time.Second), spec); err != nil {
			t.Fatal(err)
		}
		ids[spec.SandboxID] = true
	}
	other, _ := func() (*modalworker.Backend, error) {
		_, ob := setupWith(t, srv, nil)
		return ob, nil
	}()
	if _, err := other.Create(ctxT(t, 30*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(other), Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	restarted := newBackend(t, srv, func(c *modalworker.Config) { c.WorkerID = workerID(b) })
	listed, err := restarted.ListSandboxes(ctxT(t, 10*time.Second))
	if err != nil || len(listed) != 5 {
		t.Fatalf("list: %+v, %v", listed, err)
	}
	for _, l := range listed {
		if !ids[l.SandboxID] || l.WorkerID != workerID(b) || l.Deadline.IsZero() || l.CreatedAt.IsZero() {
			t.Fatalf("listed %+v", l)
		}
	}
	var out bytes.Buffer
	if _, err := restarted.Exec(ctxT(t, 30*time.Second), listed[0].SandboxID, worker.Process{ID: events.NewID(), Cmd: []string{"echo", "adopted"}, Stdout: &out, Stderr: &out}); err != nil || out.String() != "adopted\n" {
		t.Fatalf("exec in adopted sandbox: %q, %v", out.String(), err)
	}
	for id := range ids {
		if err := restarted.Kill(ctxT(t, 30*time.Second), id); err != nil {
			t.Fatal(err)
		}
	}
	if listed, err := restarted.ListSandboxes(ctxT(t, 10*time.Second)); err != nil || len(listed) != 0 {
		t.Fatalf("after kills: %+v, %v", listed, err)
	}
	if err := restarted.Kill(ctxT(t, 10*time.Second), "nosuch"); err != nil {
		t.Fatalf("kill of an unknown sandbox: %v", err)
	}
	if got := len(srv.SandboxIDs()); got != 1 {
		t.Fatalf("%d sandboxes left, want the other worker's 1", got)
	}
	otherList, _ := other.ListSandboxes(ctxT(t, 10*time.Second))
	for _, l := range otherList {
		_ = other.Kill(ctxT(t, 10*time.Second), l.SandboxID)
	}
}

// setupWith registers another backend on an existing fake.
func setupWith(t *testing.T, srv *modalfake.Server, mod func(*modalworker.Config)) (*modalfake.Server, *modalworker.Backend) {
	var wid string
	b := newBackend(t, srv, func(c *modalworker.Config) {
		if mod != nil {
			mod(c)
		}
		wid = c.WorkerID
	})
	fakes[b] = srv
	backendWorker[b] = wid
	t.Cleanup(func() { delete(fakes, b); delete(backendWorker, b) })
	return srv, b
}

// TestStartupReconcileRemovesOrphans: a Modal sandbox tagged with the
// worker's id that no registry entry owns is terminated when the worker
// starts (the runtime's reconciliation over ListSandboxes).
func TestStartupReconcileRemovesOrphans(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	orphan := worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(10 * time.Minute)}
	if _, err := b.Create(ctxT(t, 30*time.Second), orphan); err != nil {
		t.Fatal(err)
	}
	if len(srv.SandboxIDs()) != 1 {
		t.Fatalf("sandboxes %v", srv.SandboxIDs())
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: routing, Worker: func(c *worker.Config) { c.WorkerID = workerID(b) }})
	sbxtest.Eventually(t, 20*time.Second, func() bool { return len(srv.SandboxIDs()) == 0 }, "orphan %s not removed: %v", orphan.SandboxID, srv.SandboxIDs())
	// A sandbox the registry owns survives.
	r, err := env.Client.Create(ctxT(t, 30*time.Second), events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Client.Kill(context.Background(), r.SandboxID)
	if listed, err := b.ListSandboxes(ctxT(t, 10*time.Second)); err != nil || len(listed) != 1 || listed[0].SandboxID != r.SandboxID {
		t.Fatalf("listed %+v, %v", listed, err)
	}
}

// TestDSN: modal://IMAGE picks the image without a routing class.
func TestDSN(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{DSN: "modal://alpine:3.20", TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Client.Kill(context.Background(), r.SandboxID)
	if r.Backend != "modal" || r.Isolation != events.TierGVisor {
		t.Fatalf("create reply %+v", r)
	}
	info := sandboxOf(t, b, r.SandboxID)
	if info.ImageID == "" || srv.Calls("ImageGetOrCreate") != 1 {
		t.Fatalf("image %q after %d ImageGetOrCreate calls", info.ImageID, srv.Calls("ImageGetOrCreate"))
	}
	if got, err := env.Client.Get(ctx, r.SandboxID); err != nil || got.Image != "modal:alpine:3.20" {
		t.Fatalf("get: %+v, %v", got, err)
	}
}
