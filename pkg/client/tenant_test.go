package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// modes are the two ways a client reads output and files: the services
// account's JetStream (open deployment, operators) and the API a tenant
// uses (live subjects, attach, files.get/put), forced here on an open
// deployment; the authenticated suite runs the same paths as a tenant.
var modes = []struct {
	name string
	opts []client.Option
}{
	{"jetstream", nil},
	{"api", []client.Option{client.WithAPIPaths()}},
}

func modeClient(t *testing.T, env *sbxtest.Env, opts []client.Option, extra ...client.Option) *client.Client {
	t.Helper()
	cl, err := client.New(env.Conn("client-"+t.Name()), append(append([]client.Option{client.WithTeardownGrace(2 * time.Second)}, opts...), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readAll reads a process to its end: stdout, stderr, the result.
func readAll(t *testing.T, p *client.Process) (string, string, *events.ExecResult) {
	t.Helper()
	var out, errout strings.Builder
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Missing != 0 {
			t.Fatalf("gap of %d chunks before %s seq %d", c.Missing, c.Stream, c.Seq)
		}
		if c.Stream == events.Stderr {
			errout.Write(c.Data)
		} else {
			out.Write(c.Data)
		}
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return out.String(), errout.String(), res
}

// TestStreamAndAttachByMode: a streamed process's output, and a late
// attach after it exited, are complete and in order on both paths.
func TestStreamAndAttachByMode(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cl := modeClient(t, env, m.opts)
			if got := cl.UsesAPIPaths(); got != (m.name == "api") {
				t.Fatalf("api paths: %v", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sb := env.Create(ctx)
			defer env.Client.Kill(context.Background(), sb.SandboxID)
			p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"interleave", "50"}})
			if err != nil {
				t.Fatal(err)
			}
			out, errout, res := readAll(t, p)
			var wantOut, wantErr strings.Builder
			for i := 1; i <= 50; i++ {
				fmt.Fprintf(&wantOut, "out %d\n", i)
				fmt.Fprintf(&wantErr, "err %d\n", i)
			}
			if out != wantOut.String() || errout != wantErr.String() || res.ExitCode != 0 {
				t.Fatalf("stream: stdout %q stderr %q exit %d", out, errout, res.ExitCode)
			}
			// Attach after the exit: everything again, from the store.
			late, err := cl.Attach(ctx, sb.SandboxID, p.ProcessID)
			if err != nil {
				t.Fatal(err)
			}
			out2, errout2, res2 := readAll(t, late)
			if out2 != out || errout2 != errout || res2.ExitCode != 0 {
				t.Fatalf("late attach: stdout %q stderr %q exit %d", out2, errout2, res2.ExitCode)
			}
			// Attach while it runs.
			p3, err := cl.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", "20", "20"}})
			if err != nil {
				t.Fatal(err)
			}
			defer p3.Close()
			mid, err := cl.Attach(ctx, sb.SandboxID, p3.ProcessID)
			if err != nil {
				t.Fatal(err)
			}
			out3, _, _ := readAll(t, mid)
			var wantDrip strings.Builder
			for i := 1; i <= 20; i++ {
				fmt.Fprintf(&wantDrip, "drip %d\n", i)
			}
			if out3 != wantDrip.String() {
				t.Fatalf("attach while running: %q", out3)
			}
		})
	}
}

// TestStreamSurvivesServerRestartAPIPath: as TestStreamSurvivesServerRestart,
// for a tenant: the live subscription comes back with the connection and
// the client attaches again; every line arrives once and in order.
func TestStreamSurvivesServerRestartAPIPath(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	cl := modeClient(t, env, []client.Option{client.WithAPIPaths()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	const lines = 30
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"drip", fmt.Sprint(lines), "100"}})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	restarted := false
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Missing != 0 {
			t.Fatalf("gap of %d chunks before seq %d", c.Missing, c.Seq)
		}
		got.Write(c.Data)
		if !restarted && strings.Count(got.String(), "\n") >= 5 {
			restarted = true
			env.RestartServer()
		}
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "drip %d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("output across a restart:\n%q\nwant\n%q", got.String(), want.String())
	}
}

// TestStreamEndsWhenItsWorkerIsLostAPIPath: without KV, the idle check
// asks the API (get, backends) and ends the stream with SandboxGone.
func TestStreamEndsWhenItsWorkerIsLostAPIPath(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	cl := modeClient(t, env, []client.Option{client.WithAPIPaths(), client.WithIdleCheck(time.Second)})
	sb := env.Create(context.Background())
	p, err := cl.Stream(context.Background(), events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "600000"}})
	if err != nil {
		t.Fatal(err)
	}
	env.CrashWorkers()
	done := make(chan error, 1)
	go func() { _, err := p.Wait(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Fatalf("Wait after the worker was lost: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait hung after the worker was lost")
	}
}

// TestFilesByMode: files of every size class round-trip on both paths:
// inline, exactly the inline limit, and multi-part (files.put/files.get).
func TestFilesByMode(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sizes := []int{0, 1000, events.MaxInlineFileBytes, events.MaxInlineFileBytes + 1, 2 << 20}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cl := modeClient(t, env, m.opts)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sb := env.Create(ctx)
			defer env.Client.Kill(context.Background(), sb.SandboxID)
			for _, size := range sizes {
				data := make([]byte, size)
				_, _ = rand.Read(data)
				path := fmt.Sprintf("/tmp/f%d.bin", size)
				start := time.Now()
				if err := cl.WriteFile(ctx, sb.SandboxID, path, data, 0o600); err != nil {
					t.Fatalf("write %d bytes: %v", size, err)
				}
				wrote := time.Since(start)
				start = time.Now()
				back, err := cl.ReadFile(ctx, sb.SandboxID, path)
				if err != nil {
					t.Fatalf("read %d bytes: %v", size, err)
				}
				if !bytes.Equal(back, data) {
					t.Fatalf("%d bytes came back as %d different bytes", size, len(back))
				}
				t.Logf("%d bytes: write %v, read %v", size, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			}
			entries, err := cl.ListFiles(ctx, sb.SandboxID, "/tmp")
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(sizes) {
				t.Fatalf("list: %+v", entries)
			}
		})
	}
}
