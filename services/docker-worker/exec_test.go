//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

func TestExec(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)

	tests := []struct {
		name       string
		p          worker.Process
		wantOut    string
		wantErrOut string
		wantCode   int
		wantSignal string
	}{
		{name: "argv kept apart", p: worker.Process{Cmd: []string{"printf", "%s|", "a b", "'c'", `"d"`, "$HOME", ""}},
			wantOut: `a b|'c'|"d"|$HOME||`},
		{name: "env", p: worker.Process{Cmd: []string{"sh", "-c", `echo "$A-$B"`}, Env: map[string]string{"A": "1", "B": "two words"}},
			wantOut: "1-two words\n"},
		{name: "process id in env", p: worker.Process{ID: "p-env", Cmd: []string{"sh", "-c", `echo $SBX_PROCESS_ID`}}, wantOut: "p-env\n"},
		{name: "cwd", p: worker.Process{Cmd: []string{"pwd"}, Cwd: "/tmp"}, wantOut: "/tmp\n"},
		{name: "default cwd", p: worker.Process{Cmd: []string{"pwd"}}, wantOut: "/work\n"},
		{name: "stdin", p: worker.Process{Cmd: []string{"cat"}, Stdin: strings.NewReader("hello\x00world")}, wantOut: "hello\x00world"},
		{name: "no stdin is EOF", p: worker.Process{Cmd: []string{"cat"}}, wantOut: ""},
		{name: "stdout and stderr apart", p: worker.Process{Cmd: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}},
			wantOut: "out\nout2\n", wantErrOut: "err\n"},
		{name: "exit code", p: worker.Process{Cmd: []string{"sh", "-c", "exit 3"}}, wantCode: 3},
		{name: "exit 127 of a shell is a normal exit", p: worker.Process{Cmd: []string{"sh", "-c", "exit 127"}}, wantCode: 127},
		{name: "exit 126 of a shell is a normal exit", p: worker.Process{Cmd: []string{"sh", "-c", "exit 126"}}, wantCode: 126},
		{name: "command not found inside a shell", p: worker.Process{Cmd: []string{"sh", "-c", "no-such-cmd"}}, wantCode: 127,
			wantErrOut: "sh: no-such-cmd: not found\n"},
		{name: "output that looks like a runtime error", p: worker.Process{Cmd: []string{"sh", "-c", "echo 'OCI runtime exec failed: joke'; exit 126"}},
			wantOut: "OCI runtime exec failed: joke\n", wantCode: 126},
		{name: "killed by a signal", p: worker.Process{Cmd: []string{"sh", "-c", "kill -TERM $$"}}, wantCode: 143, wantSignal: "TERM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, b, id, tc.p)
			if r.stdout != tc.wantOut || r.stderr != tc.wantErrOut || r.status.Code != tc.wantCode || r.status.Signal != tc.wantSignal {
				t.Errorf("got out %q err %q status %+v; want out %q err %q code %d signal %q",
					r.stdout, r.stderr, r.status, tc.wantOut, tc.wantErrOut, tc.wantCode, tc.wantSignal)
			}
		})
	}
}

func TestExecFailed(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	for _, p := range []worker.Process{
		{Cmd: []string{"no-such-binary"}},
		{Cmd: []string{"/etc/passwd"}},
		{Cmd: []string{"true"}, Cwd: "/no/such/dir"},
	} {
		var out bytes.Buffer
		_, err := b.Exec(context.Background(), id, worker.Process{Cmd: p.Cmd, Cwd: p.Cwd, Stdout: &out, Stderr: &out})
		if !errors.Is(err, events.ErrExecFailed) {
			t.Errorf("%q cwd %q: err %v, want ExecFailed", p.Cmd, p.Cwd, err)
		}
		if out.Len() != 0 {
			t.Errorf("%q: the runtime's message leaked into the output: %q", p.Cmd, out.String())
		}
	}
}

func TestExecBinaryAndLargeOutput(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	ctx := context.Background()

	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	if err := b.WriteFile(ctx, id, "/work/blob", 0o644, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	r := run(t, b, id, worker.Process{Cmd: []string{"cat", "/work/blob"}})
	if !bytes.Equal([]byte(r.stdout), data) {
		t.Fatalf("binary output differs: %d bytes back of %d", len(r.stdout), len(data))
	}
	r = run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "cat /work/blob >&2"}})
	if !bytes.Equal([]byte(r.stderr), data) || r.stdout != "" {
		t.Fatalf("binary stderr differs")
	}

	// 64 MiB through a counting writer.
	var n countWriter
	st, err := b.Exec(ctx, id, worker.Process{Cmd: []string{"head", "-c", "67108864", "/dev/zero"}, Stdout: &n})
	if err != nil || st.Code != 0 || n != 64<<20 {
		t.Fatalf("large output: %d bytes, status %+v, err %v", n, st, err)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// slowWriter blocks every write: output must wait for it (backpressure).
type slowWriter struct {
	gate  chan struct{}
	total int
}

func (s *slowWriter) Write(p []byte) (int, error) { <-s.gate; s.total += len(p); return len(p), nil }

func TestExecBackpressure(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	w := &slowWriter{gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), id, worker.Process{Cmd: []string{"head", "-c", "16777216", "/dev/zero"}, Stdout: w})
		done <- err
	}()
	// While the writer blocks, the process cannot finish: pipe and socket
	// buffers hold far less than 16 MiB.
	select {
	case err := <-done:
		t.Fatalf("exec finished while its output was blocked: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(w.gate)
	if err := <-done; err != nil || w.total != 16<<20 {
		t.Fatalf("err %v, %d bytes", err, w.total)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	for _, tc := range []struct {
		name  string
		force func()
	}{
		{"from the host", func() {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.force()
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			start := time.Now()
			// A child in its own session and a grandchild: all must die.
			st, err := b.Exec(ctx, id, worker.Process{ID: "p-timeout", Cmd: []string{"sh", "-c",
				"sleep 1001 & setsid sleep 1002 & (sleep 1003 &) ; sleep 1004"}, Stdout: io.Discard, Stderr: io.Discard})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want the context's", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("exec returned %s after its deadline", d)
			}
			if st.Signal != "KILL" {
				t.Errorf("status %+v", st)
			}
			eventually(t, 10*time.Second, "killed processes gone", func() bool {
				return sh(t, b, id, "ps -o args | grep -c '[s]leep 100' || true") == "0"
			})
		})
	}
}

func TestKillInsideFallback(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	sb, err := b.lookup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan worker.ExitStatus, 1)
	go func() {
		st, _ := b.Exec(context.Background(), id, worker.Process{ID: "p-inside", Cmd: []string{"sh", "-c", "sleep 2001 & sleep 2002"}})
		done <- st
	}()
	eventually(t, 10*time.Second, "process started", func() bool {
		return sh(t, b, id, "ps -o args | grep -c '[s]leep 200' || true") == "2"
	})
	// The path taken when the daemon's pids are not visible to the worker.
	if err := b.signalInside(context.Background(), sb, "p-inside", 9); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-done:
		if st.Code != 137 {
			t.Errorf("status %+v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec did not end")
	}
	eventually(t, 10*time.Second, "children gone", func() bool {
		return sh(t, b, id, "ps -o args | grep -c '[s]leep 200' || true") == "0"
	})
}

func TestSignal(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b)
	ctx := context.Background()
	if err := b.Signal(ctx, id, "p-none", "TERM"); !errors.Is(err, events.ErrProcessNotFound) {
		t.Errorf("signal to no process: %v", err)
	}
	if err := b.Signal(ctx, id, "p-none", "NOPE"); !errors.Is(err, events.ErrInvalidValue) {
		t.Errorf("bad signal: %v", err)
	}
	for _, sig := range []string{"TERM", "SIGINT", "hup", "10"} {
		t.Run(sig, func(t *testing.T) {
			ready := make(chan struct{})
			done := make(chan worker.ExitStatus, 1)
			go func() {
				st, err := b.Exec(ctx, id, worker.Process{ID: "p-sig", Cmd: []string{"sh", "-c",
					`trap 'echo got; exit 7' TERM INT HUP USR1; echo ready; while true; do sleep 0.05; done`}, Stdout: closeOnWrite(ready)})
				if err != nil {
					t.Error(err)
				}
				done <- st
			}()
			<-ready // the trap is set
			if err := b.Signal(ctx, id, "p-sig", sig); err != nil {
				t.Fatal(err)
			}
			select {
			case st := <-done:
				if st.Code != 7 {
					t.Errorf("status %+v", st)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("process did not end on the signal")
			}
		})
	}
}

func TestRunCode(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, Config{})
	id := mustCreate(t, b, withImage(pythonImage))
	ctx := context.Background()
	tests := []struct {
		name, lang, code, wantOut, wantErrName string
		wantCode                               int
	}{
		{name: "print", code: "print(6*7)", wantOut: "42\n"},
		{name: "exception", code: "x = 1\n1/0", wantErrName: "ZeroDivisionError", wantCode: 1},
		{name: "large code via stdin", code: strings.Repeat("# pad\n", 20000) + "print('big')", wantOut: "big\n"},
		{name: "sh", lang: "sh", code: "echo $((1+2))", wantOut: "3\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			res, err := b.RunCode(ctx, id, worker.CodeRequest{Language: tc.lang, Code: tc.code, Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.wantOut || res.Code != tc.wantCode {
				t.Errorf("out %q code %d stderr %q", out.String(), res.Code, errb.String())
			}
			if tc.wantErrName != "" && (res.Error == nil || res.Error.Name != tc.wantErrName || !strings.Contains(res.Error.Traceback, "Traceback")) {
				t.Errorf("error %+v", res.Error)
			}
		})
	}
	// With the agent, a context id is stateful code (TestStatefulContext);
	// without it, CapabilityNotSupported (TestAgentOff).
	if res, err := b.RunCode(ctx, id, worker.CodeRequest{Code: "1", ContextID: "c1"}); err != nil || len(res.Results) != 1 || res.Results[0].Text != "1" {
		t.Errorf("stateful: %+v %v", res, err)
	}
	if _, err := b.RunCode(ctx, id, worker.CodeRequest{Language: "cobol", Code: "1"}); !errors.Is(err, events.ErrInvalidValue) {
		t.Errorf("cobol: %v", err)
	}
}
