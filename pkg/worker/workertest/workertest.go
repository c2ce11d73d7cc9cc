package workertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Commands expresses the suite's probes as argv for a backend.
type Commands struct {
	Echo       func(s string) []string // writes s and "\n" to stdout
	EchoStderr func(s string) []string // writes s and "\n" to stderr
	Exit       func(code int) []string
	Sleep      func(d time.Duration) []string
	// Write writes n bytes to stdout; Pattern(n) must be what it writes.
	Write   func(n int) []string
	Pattern func(n int) []byte
	// Interleave writes "out i" lines to stdout and "err i" to stderr, i = 1..n.
	Interleave func(n int) []string
	// Drip writes "drip i" lines, i = 1..n, about d apart.
	Drip func(n int, d time.Duration) []string
	Cat  []string                   // copies stdin to stdout
	Env  func(name string) []string // writes $name and "\n"
	Pwd  []string                   // writes the working directory and "\n"
	// Cwd is a directory that exists in a new sandbox.
	Cwd string
	// Missing is a command that does not exist.
	Missing []string
	// Shell runs a POSIX shell script (tty, stty, read): the PTY probe's
	// commands; nil skips it.
	Shell func(script string) []string
	// Spawn starts two background children that outlive a plain kill of
	// their parent (one in its own process group or session), writes their
	// pids on one line, and waits; Alive(pid) exits 0 while pid runs. Nil
	// skips the process-group kill probe.
	Spawn []string
	Alive func(pid string) []string
}

// Options configure the suite.
type Options struct {
	// Routing is the routing YAML with a default class on the backend.
	Routing string
	// CreateTimeoutS is the lifetime of the suite's sandboxes; default 120.
	CreateTimeoutS int
	// WriteBytes is the size of the streaming-order probe; default 4 MiB.
	WriteBytes int
	// Unsupported declares the capabilities the backend does not offer
	// (Modal: set_timeout and signal). The DeclaredCapabilities test checks
	// that they are not advertised and that the operations they gate are
	// refused with CapabilityNotSupported (set_timeout; a signal other than
	// KILL, while KILL still works).
	Unsupported []events.Capability
	// CodeClass is a class of Routing whose image has Python, for the
	// stateful-context probe; empty skips it.
	CodeClass string
	// PlotClass is a class of Routing whose image has matplotlib
	// (sandboxio/python-data), for the stateful probe's image/png check;
	// empty skips that check.
	PlotClass string
	// Restarted gives the backend a worker restarted with workerID uses
	// (a new instance, as a new process builds it, where the backend
	// keeps state outside the process; the same one for an in-memory
	// backend). The re-attach probe runs a worker with the first call's
	// backend, crashes it, and starts another with the second's. Nil skips
	// the probe.
	Restarted func(t *testing.T, workerID string) worker.Backend
	// Reattaches says the restarted worker re-attaches to the processes
	// (the Docker agent's process table); otherwise the probe expects
	// SBX_E1621 ProcessLost.
	Reattaches bool
}

// Run runs the whole suite against backend.
func Run(t *testing.T, backend worker.Backend, cmds Commands, opts Options) {
	RunProbes(t, backend, cmds, opts)
}

// RunProbes runs the suite's probes named (Run's subtest names, e.g.
// "StatefulContexts", "PTY") against backend, all of them if none is named:
// for a runtime, such as gVisor, whose whole suite runs elsewhere.
func RunProbes(t *testing.T, backend worker.Backend, cmds Commands, opts Options, names ...string) {
	if opts.CreateTimeoutS == 0 {
		opts.CreateTimeoutS = 120
	}
	if opts.WriteBytes == 0 {
		opts.WriteBytes = 4 << 20
	}
	env := sbxtest.Start(t, sbxtest.Options{Backend: backend, Routing: opts.Routing})
	s := &suite{env: env, cmds: cmds, opts: opts, backend: backend}
	tests := []struct {
		name string
		f    func(*testing.T)
	}{
		{"Lifecycle", s.lifecycle},
		{"ExecStdoutStderr", s.execStdoutStderr},
		{"ExitCodes", s.exitCodes},
		{"EnvCwdStdin", s.envCwdStdin},
		{"StreamOrder", s.streamOrder},
		{"StreamInterleave", s.streamInterleave},
		{"StreamIsLive", s.streamIsLive},
		{"LateAttach", s.lateAttach},
		{"ExecTimeout", s.execTimeout},
		{"CancelKillsProcess", s.cancelKillsProcess},
		{"StreamCloseKillsProcess", s.streamCloseKills},
		{"KillIdempotent", s.killIdempotent},
		{"Deadline", s.deadline},
		{"Errors", s.errors},
		{"ConcurrentExecs", s.concurrentExecs},
		{"DeclaredCapabilities", s.declaredCapabilities},
		{"StatefulContexts", s.statefulContexts},
		{"PTY", s.pty},
		{"ProcessGroupKill", s.processGroupKill},
		{"ReattachAfterRestart", s.reattachAfterRestart},
		{"Durable", s.durable}, // durable.go
	}
	ran := 0
	for _, tc := range tests {
		if len(names) > 0 && !slices.Contains(names, tc.name) {
			continue
		}
		ran++
		t.Run(tc.name, tc.f)
	}
	if ran < len(names) {
		t.Fatalf("probes %q: only %d of them exist", names, ran)
	}
}

type suite struct {
	env     *sbxtest.Env
	cmds    Commands
	opts    Options
	backend worker.Backend
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) create(t *testing.T, ctx context.Context) string {
	t.Helper()
	r, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = s.env.Client.Kill(kctx, r.SandboxID)
	})
	return r.SandboxID
}

func (s *suite) exec(t *testing.T, ctx context.Context, id string, cmd []string) *events.ExecResult {
	t.Helper()
	res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: cmd})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res
}

func (s *suite) lifecycle(t *testing.T) {
	ctx := s.ctx(t)
	r, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: s.opts.CreateTimeoutS, Metadata: map[string]string{"suite": "lifecycle"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if r.SandboxID == "" || !events.ValidID(r.SandboxID) || r.Deadline.Before(time.Now()) {
		t.Fatalf("create reply: %+v", r)
	}
	got, err := s.env.Client.Get(ctx, r.SandboxID)
	if err != nil || got.State != events.StateRunning || got.Worker != s.env.WorkerID {
		t.Fatalf("get after create: %+v, %v", got, err)
	}
	list, err := s.env.Client.List(ctx, events.ListRequest{Metadata: map[string]string{"suite": "lifecycle"}})
	if err != nil || len(list) != 1 || list[0].SandboxID != r.SandboxID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if res := s.exec(t, ctx, r.SandboxID, s.cmds.Echo("alive")); string(res.Stdout) != "alive\n" {
		t.Fatalf("exec: stdout %q", res.Stdout)
	}
	kr, err := s.env.Client.Kill(ctx, r.SandboxID)
	if err != nil || kr.State != events.StateGone || kr.AlreadyGone {
		t.Fatalf("kill: %+v, %v", kr, err)
	}
	got, err = s.env.Client.Get(ctx, r.SandboxID)
	if err != nil || got.State != events.StateGone {
		t.Fatalf("get after kill: %+v, %v", got, err)
	}
	if _, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: s.cmds.Echo("x")}); !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec after kill: %v, want SandboxGone", err)
	}
}

func (s *suite) execStdoutStderr(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	out := s.exec(t, ctx, id, s.cmds.Echo("to stdout"))
	if string(out.Stdout) != "to stdout\n" || len(out.Stderr) != 0 || out.ExitCode != 0 || out.Streamed {
		t.Fatalf("echo: %+v stdout=%q stderr=%q", out, out.Stdout, out.Stderr)
	}
	errRes := s.exec(t, ctx, id, s.cmds.EchoStderr("to stderr"))
	if string(errRes.Stderr) != "to stderr\n" || len(errRes.Stdout) != 0 {
		t.Fatalf("echo to stderr: stdout=%q stderr=%q", errRes.Stdout, errRes.Stderr)
	}
}

func (s *suite) exitCodes(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	for _, code := range []int{0, 1, 3, 42, 255} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			if res := s.exec(t, ctx, id, s.cmds.Exit(code)); res.ExitCode != code {
				t.Fatalf("exit code %d, want %d", res.ExitCode, code)
			}
		})
	}
}

func (s *suite) envCwdStdin(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Env("SBX_SUITE"), Env: map[string]string{"SBX_SUITE": "v1 with spaces"}})
	if err != nil || string(res.Stdout) != "v1 with spaces\n" {
		t.Fatalf("env: %q, %v", res.Stdout, err)
	}
	res, err = s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Pwd, Cwd: s.cmds.Cwd})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != s.cmds.Cwd {
		t.Fatalf("cwd: %q, %v", res.Stdout, err)
	}
	in := "line one\nline two\x00binary\xff\n"
	enc, encoding := events.EncodeBytes([]byte(in))
	res, err = s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Cat, Stdin: enc, StdinEncoding: encoding})
	if err != nil || string(res.Stdout) != in {
		t.Fatalf("stdin: %q, %v", res.Stdout, err)
	}
}

func (s *suite) streamOrder(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Write(s.opts.WriteBytes)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got bytes.Buffer
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Missing != 0 || c.Stream != events.Stdout {
			t.Fatalf("chunk %d of %s: %d missing", c.Seq, c.Stream, c.Missing)
		}
		got.Write(c.Data)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 || !res.Streamed || res.StdoutBytes != int64(s.opts.WriteBytes) {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if !bytes.Equal(got.Bytes(), s.cmds.Pattern(s.opts.WriteBytes)) {
		t.Fatalf("streamed %d bytes that differ from the pattern", got.Len())
	}
}

func (s *suite) streamInterleave(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	const n = 200
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Interleave(n)})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Stream == events.Stdout {
			out.Write(c.Data)
		} else {
			errb.Write(c.Data)
		}
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if out.String() != wantOut.String() || errb.String() != wantErr.String() {
		t.Fatalf("per-stream order broken:\nstdout %q\nstderr %q", trim(out.String()), trim(errb.String()))
	}
}

// streamIsLive: output arrives while the process runs, not at its end.
func (s *suite) streamIsLive(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	start := time.Now()
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Drip(3, time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := p.Next()
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	if !strings.HasPrefix(string(c.Data), "drip 1") {
		t.Fatalf("first chunk %q", c.Data)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if total := time.Since(start); first > total-time.Second {
		t.Fatalf("first output after %s of a %s process: output is not streamed as it comes", first, total)
	}
}

func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func (s *suite) lateAttach(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Interleave(50)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	// Attach after the exit: the stream still holds everything.
	for attempt := 0; attempt < 2; attempt++ {
		q, err := s.env.Client.Attach(ctx, id, p.ProcessID)
		if err != nil {
			t.Fatal(err)
		}
		lines := 0
		for c, err := range q.Chunks() {
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(c.Data, []byte("\n"))
		}
		res, err := q.Wait()
		if err != nil || res.ExitCode != 0 || lines != 100 {
			t.Fatalf("late attach %d: %d lines, %+v, %v", attempt, lines, res, err)
		}
	}
}

func (s *suite) execTimeout(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	start := time.Now()
	res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Sleep(30 * time.Second), TimeoutMS: 300})
	if !errors.Is(err, events.ErrExecutionTimeout) || !errors.Is(err, events.ErrSandboxTimeout) {
		t.Fatalf("timeout: %v, want ExecutionTimeout", err)
	}
	if res == nil || !res.TimedOut {
		t.Fatalf("timeout result: %+v", res)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("a 300 ms timeout took %s", took)
	}
	// The sandbox still works after the timeout.
	if r := s.exec(t, ctx, id, s.cmds.Echo("after")); string(r.Stdout) != "after\n" {
		t.Fatalf("exec after timeout: %q", r.Stdout)
	}
	// Streamed: the exit marker says timed out.
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Sleep(30 * time.Second), TimeoutMS: 300})
	if err != nil {
		t.Fatal(err)
	}
	sres, err := p.Wait()
	if !errors.Is(err, events.ErrExecutionTimeout) || sres == nil || !sres.TimedOut {
		t.Fatalf("streamed timeout: %+v, %v", sres, err)
	}
}

func (s *suite) cancelKillsProcess(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	cctx, cancel := context.WithCancel(ctx)
	pid := events.NewID()
	done := make(chan error, 1)
	go func() {
		_, err := s.env.Client.Exec(cctx, events.ExecRequest{SandboxID: id, ProcessID: pid, Cmd: s.cmds.Sleep(60 * time.Second)})
		done <- err
	}()
	sbxtest.Eventually(t, 20*time.Second, func() bool { return s.processKnown(id, pid) }, "process %s never started", pid)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled exec returned %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancelled exec did not return")
	}
	// The process is gone: signalling it finds nothing.
	sbxtest.Eventually(t, 10*time.Second, func() bool {
		err := s.env.Client.Signal(ctx, id, pid, "KILL")
		return errors.Is(err, events.ErrProcessNotFound)
	}, "process %s still running after its exec was cancelled", pid)
}

// processKnown probes with stdin (a no-op for a process without kept
// stdin): ProcessNotFound means the worker does not know it yet.
func (s *suite) processKnown(sandboxID, pid string) bool {
	err := s.env.Client.SendStdin(context.Background(), sandboxID, pid, nil, false)
	return !errors.Is(err, events.ErrProcessNotFound)
}

func (s *suite) streamCloseKills(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Sleep(60 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 20*time.Second, func() bool { return s.processKnown(id, p.ProcessID) }, "process never started")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	q, err := s.env.Client.Attach(ctx, id, p.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Wait()
	if err != nil || res.Signal != "KILL" {
		t.Fatalf("after Close the exit marker says %+v, %v; want killed", res, err)
	}
}

func (s *suite) killIdempotent(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.env.Client.Kill(ctx, id)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent kill %d: %v", i, err)
		}
	}
	r, err := s.env.Client.Kill(ctx, id)
	if err != nil || !r.AlreadyGone {
		t.Fatalf("second kill: %+v, %v", r, err)
	}
}

func (s *suite) deadline(t *testing.T) {
	ctx := s.ctx(t)
	r, err := s.env.Client.Create(ctx, events.CreateRequest{TimeoutS: 2})
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		got, err := s.env.Client.Get(ctx, r.SandboxID)
		return err == nil && got.State == events.StateGone
	}, "sandbox %s outlived its 2 s lifetime", r.SandboxID)
	if _, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: s.cmds.Echo("x")}); !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec after deadline: %v", err)
	}
}

func (s *suite) errors(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	// A tenant is not told whether a sandbox it may not reach exists.
	unknown := events.ErrSandboxNotFound
	if s.env.Client.Tenant() != events.TenantOpen {
		unknown = events.ErrForbidden
	}
	if _, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: "nosuchsandbox", Cmd: s.cmds.Echo("x")}); !errors.Is(err, unknown) {
		t.Fatalf("unknown sandbox: %v, want %v", err, unknown)
	}
	res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Missing})
	switch {
	case errors.Is(err, events.ErrExecFailed):
	case err == nil && res.ExitCode == 127:
	default:
		t.Fatalf("missing command: %+v, %v; want ExecFailed or exit 127", res, err)
	}
	if err := s.env.Client.Signal(ctx, id, "nosuchprocess", "TERM"); !errors.Is(err, events.ErrProcessNotFound) {
		t.Fatalf("signal unknown process: %v", err)
	}
	if _, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: "bad.id", Cmd: s.cmds.Echo("x")}); !errors.Is(err, events.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
}

func (s *suite) concurrentExecs(t *testing.T) {
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("n%d", i)
			res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Echo(want)})
			if err != nil {
				errs <- err
				return
			}
			if string(res.Stdout) != want+"\n" {
				errs <- fmt.Errorf("exec %d got %q", i, res.Stdout)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (s *suite) declaredCapabilities(t *testing.T) {
	if len(s.opts.Unsupported) == 0 {
		t.Log("no capability differences declared (Options.Unsupported)")
		return
	}
	ctx := s.ctx(t)
	br, err := s.env.Client.Backends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var advertised events.Capabilities
	for _, b := range br.Backends {
		if len(b.Workers) > 0 {
			advertised = append(advertised, b.Capabilities...)
		}
	}
	for _, c := range s.opts.Unsupported {
		for _, a := range advertised {
			if a == c {
				t.Fatalf("declared unsupported, but advertised: %s", c)
			}
		}
	}
	id := s.create(t, ctx)
	for _, c := range s.opts.Unsupported {
		switch c {
		case events.CapSetTimeout:
			if _, err := s.env.Client.SetTimeout(ctx, id, time.Duration(s.opts.CreateTimeoutS)*time.Second); !errors.Is(err, events.ErrCapabilityNotSupported) {
				t.Fatalf("set_timeout: %v, want CapabilityNotSupported", err)
			}
		case events.CapSignal:
			p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Sleep(60 * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			sbxtest.Eventually(t, 20*time.Second, func() bool { return s.processKnown(id, p.ProcessID) }, "process never started")
			if err := s.env.Client.Signal(ctx, id, p.ProcessID, "TERM"); !errors.Is(err, events.ErrCapabilityNotSupported) {
				t.Fatalf("TERM: %v, want CapabilityNotSupported", err)
			}
			if err := s.env.Client.Signal(ctx, id, p.ProcessID, "KILL"); err != nil {
				t.Fatalf("KILL: %v", err)
			}
			if res, err := p.Wait(); err != nil || res.Signal != "KILL" {
				t.Fatalf("after KILL: %+v, %v", res, err)
			}
		}
	}
}
