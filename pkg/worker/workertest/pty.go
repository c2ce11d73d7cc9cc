package workertest

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// pty probes processes on a pseudo-terminal, on backends that have them (a
// worker.Resizer) and a shell (Commands.Shell): the terminal has the asked
// size, stderr is merged into it, a running process's terminal is resized,
// and a resize of a process that has no terminal is SBX_E1310 PTYNotFound
// (of one that does not exist, ProcessNotFound).
func (s *suite) pty(t *testing.T) {
	if _, ok := s.backend.(worker.Resizer); !ok {
		t.Skip("the backend has no terminals (worker.Resizer)")
	}
	if s.cmds.Shell == nil {
		t.Skip("no shell (Commands.Shell)")
	}
	ctx := s.ctx(t)
	id := s.create(t, ctx)

	// The scripts read a line first: a terminal is sized before its
	// process gets input (a Docker daemon before API 1.42 sizes an exec's
	// terminal just after it starts).
	t.Run("SizeAndStderr", func(t *testing.T) {
		res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Shell("read x; tty -s && echo is-a-tty; stty size; echo on-stderr >&2"),
			Stdin: "\n", TTY: true, Rows: 40, Cols: 120})
		if err != nil {
			t.Fatal(err)
		}
		out := string(res.Stdout)
		if res.ExitCode != 0 || !strings.Contains(out, "is-a-tty") || !strings.Contains(out, "40 120") ||
			!strings.Contains(out, "on-stderr") || len(res.Stderr) != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, out, res.Stderr)
		}
		res, err = s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Shell("read x; stty size"), Stdin: "\n", TTY: true})
		if err != nil || !strings.Contains(string(res.Stdout), "24 80") {
			t.Fatalf("the default size: %+v, %v", res, err)
		}
	})
	t.Run("NoTerminal", func(t *testing.T) {
		res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Shell("tty -s || echo not-a-tty")})
		if err != nil || string(res.Stdout) != "not-a-tty\n" {
			t.Fatalf("without tty: %+v, %v", res, err)
		}
	})
	t.Run("Resize", func(t *testing.T) {
		p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Shell("read x; stty size"),
			TTY: true, KeepStdinOpen: true, Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		poll.Eventually(t, 10*time.Second, func() error { return s.env.Client.Resize(ctx, id, p.ProcessID, 30, 100) })
		if err := p.WriteStdin(ctx, []byte("\n")); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for {
			c, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out.Write(c.Data)
		}
		if _, err := p.Wait(); err != nil || !strings.Contains(out.String(), "30 100") {
			t.Fatalf("after the resize: %q, %v", out.String(), err)
		}
	})
	t.Run("ResizeErrors", func(t *testing.T) {
		if err := s.env.Client.Resize(ctx, id, "nosuchprocess", 30, 100); !errors.Is(err, events.ErrProcessNotFound) {
			t.Fatalf("resize of no process: %v, want ProcessNotFound", err)
		}
		p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Sleep(30 * time.Second), Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var rerr error
		poll.Eventually(t, 10*time.Second, func() error {
			if rerr = s.env.Client.Resize(ctx, id, p.ProcessID, 30, 100); errors.Is(rerr, events.ErrProcessNotFound) {
				return rerr // not running yet
			}
			return nil
		})
		if !errors.Is(rerr, events.ErrPTYNotFound) {
			t.Fatalf("resize of a process without a terminal: %v, want PTYNotFound", rerr)
		}
	})
}
