//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestReattachAfterSameIDRestart: a docker worker that crashes while a client
// streams a process and another waits for a buffered exec, and comes back
// with the same id, re-attaches to both through the sandbox's agent (its
// process table, ADR 18). The streaming client gets every line exactly
// once, in order, with no gap, and the exit status; the buffered one gets
// its whole output and exit status. On each agent channel (ADR 24): the
// attach stream, taken over by the new worker's Hello; the socket, taken
// over while the old worker still holds it; the socket after the old
// worker's connection ended (a crashed process's sockets close with it).
func TestReattachAfterSameIDRestart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		channel   AgentChannel
		closedOld bool
	}{
		{"attach", ChannelAttach, false},
		{"socket-takeover", ChannelAuto, false},
		{"socket-closed", ChannelAuto, true},
	} {
		t.Run(tc.name, func(t *testing.T) { reattachAfterSameIDRestart(t, tc.channel, tc.closedOld) })
	}
}

func reattachAfterSameIDRestart(t *testing.T, channel AgentChannel, closedOld bool) {
	b := newTestBackend(t, Config{AgentChannel: channel})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t),
		Worker: func(c *worker.Config) { c.WorkerID = b.cfg.WorkerID; c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 180, Class: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := env.Client.Get(ctx, sb.SandboxID); err != nil || rec.ExecPath != events.ExecPathAgent {
		t.Fatalf("the sandbox runs without the agent: %+v %v", rec, err)
	}
	const lines = 60
	var want strings.Builder
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	stream, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c",
		fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done; exit 3`, lines)}})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var got bytes.Buffer
	for !strings.Contains(got.String(), "line 3\n") {
		c, err := stream.Next()
		if err != nil {
			t.Fatalf("stream before the restart: %v", err)
		}
		got.Write(c.Data)
	}
	type reply struct {
		res *events.ExecResult
		err error
	}
	buffered := make(chan reply, 1)
	go func() {
		res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sh", "-c", "echo begin; sleep 3; echo end; exit 4"}})
		buffered <- reply{res, err}
	}()
	env.WaitOpened(t, "docker", sb.SandboxID, events.OpExec, 2) // the stream, the buffered exec

	if got := b.lookupCached(sb.SandboxID).sockName != ""; got != (channel == ChannelAuto) {
		t.Fatalf("socket channel %v, want %v", got, channel == ChannelAuto)
	}
	env.CrashWorkers()
	if closedOld {
		for _, cl := range b.agentClients() {
			_ = cl.Close()
		}
	}
	b2 := newTestBackend(t, Config{WorkerID: b.cfg.WorkerID, AgentChannel: channel})
	w2, err := worker.New(worker.Config{WorkerID: b.cfg.WorkerID, Bus: env.Bus, KillOnShutdown: false, Logger: testLogger(t)}, env.Conn("worker-2"), b2)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })

	for {
		c, err := stream.Next()
		if err != nil {
			break
		}
		if c.Missing > 0 {
			t.Errorf("%d chunks of %s missing before seq %d", c.Missing, c.Stream, c.Seq)
		}
		got.Write(c.Data)
	}
	res, err := stream.Wait()
	if err != nil {
		t.Fatalf("stream after the restart: %v, want its exit status", err)
	}
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", res.ExitCode)
	}
	if got.String() != want.String() {
		t.Fatalf("streamed output across the restart:\n%q\nwant\n%q", got.String(), want.String())
	}
	t.Logf("streamed %d lines across the restart, exit %d", lines, res.ExitCode)

	r := <-buffered
	if r.err != nil {
		t.Fatalf("buffered exec across the restart: %v, want its result", r.err)
	}
	if string(r.res.Stdout) != "begin\nend\n" || r.res.ExitCode != 4 {
		t.Fatalf("buffered exec across the restart: %q exit %d", r.res.Stdout, r.res.ExitCode)
	}

	// The re-adopted sandbox works.
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil {
		t.Fatalf("exec after the restart: %v", err)
	}
}

// TestReattachStdinAndResize: a process whose stdin is kept open, and one on
// a terminal, re-attached by a worker restarted with the same id: stdin
// written after the restart reaches the process, its close ends it, and a
// resize after the restart reaches the terminal.
func TestReattachStdinAndResize(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t),
		Worker: func(c *worker.Config) { c.WorkerID = b.cfg.WorkerID; c.KillOnShutdown = false }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 180, Class: "base"})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, KeepStdinOpen: true,
		Cmd: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo eof; exit 5`}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	term, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, KeepStdinOpen: true, TTY: true, Rows: 24, Cols: 80,
		Cmd: []string{"sh", "-c", `stty size; read x; stty size`}})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if err := reader.WriteStdin(ctx, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	var rout, tout bytes.Buffer
	readUntil := func(p *client.Process, out *bytes.Buffer, want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			c, err := p.Next()
			if err != nil {
				t.Fatalf("waiting for %q, got %q: %v", want, out.String(), err)
			}
			out.Write(c.Data)
		}
	}
	readUntil(reader, &rout, "got a\n")
	readUntil(term, &tout, "24 80")
	env.WaitOpened(t, "docker", sb.SandboxID, events.OpExec, 2)

	env.CrashWorkers()
	b2 := newTestBackend(t, Config{WorkerID: b.cfg.WorkerID})
	w2, err := worker.New(worker.Config{WorkerID: b.cfg.WorkerID, Bus: env.Bus, KillOnShutdown: false, Logger: testLogger(t)}, env.Conn("worker-2"), b2)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w2.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-stopped })

	// The new worker has re-attached once it takes the resize.
	eventually(t, 30*time.Second, "a resize after the restart", func() bool {
		return env.Client.Resize(ctx, sb.SandboxID, term.ProcessID, 30, 100) == nil
	})
	if err := term.WriteStdin(ctx, []byte("x\n")); err != nil {
		t.Fatalf("terminal stdin after the restart: %v", err)
	}
	readUntil(term, &tout, "30 100")
	if res, err := term.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("terminal process: %+v %v (output %q)", res, err, tout.String())
	}

	if err := reader.WriteStdin(ctx, []byte("b\n")); err != nil {
		t.Fatalf("stdin after the restart: %v", err)
	}
	if err := reader.CloseStdin(ctx); err != nil {
		t.Fatalf("close stdin after the restart: %v", err)
	}
	for {
		c, err := reader.Next()
		if err != nil {
			break
		}
		rout.Write(c.Data)
	}
	res, err := reader.Wait()
	if err != nil || res.ExitCode != 5 || rout.String() != "got a\ngot b\neof\n" {
		t.Fatalf("stdin across the restart: %q, %+v %v; want got a, got b, eof, exit 5", rout.String(), res, err)
	}
}
