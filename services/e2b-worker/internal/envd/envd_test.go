package envd_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/e2bapi"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envd"
)

type env struct {
	fake *e2bfake.Server
	api  *e2bapi.Client
	sb   *e2bapi.Sandbox
	c    *envd.Client
}

// setup starts a fake, creates a sandbox through the API and returns an envd
// client for it. The test fails on any protocol deviation.
func setup(t *testing.T, mod func(*envd.Config)) *env {
	t.Helper()
	fake := e2bfake.New(e2bfake.Options{TB: t})
	fake.Start()
	cfg := e2bapi.ConfigFromEnv(func(k string) string { return fake.Env()[k] })
	api, err := e2bapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := api.Create(ctx, e2bapi.CreateRequest{TemplateID: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ecfg := envd.Config{
		BaseURL:     cfg.EnvdURL(sb.SandboxID, sb.Domain),
		SandboxID:   sb.SandboxID,
		AccessToken: sb.EnvdAccessToken,
		User:        "user",
	}
	if mod != nil {
		mod(&ecfg)
	}
	c, err := envd.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{fake: fake, api: api, sb: sb, c: c}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, poll.Bool(what, cond))
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		cmd        string
		opts       envd.RunOptions
		wantOut    string
		wantErr    string
		wantCode   int
		wantExited bool
		wantStatus string
	}{
		{name: "exit 0", cmd: "echo hello", wantOut: "hello\n", wantExited: true, wantStatus: "exit status 0"},
		{name: "exit 3 with stderr", cmd: "echo out; echo err >&2; exit 3", wantOut: "out\n", wantErr: "err\n", wantCode: 3, wantExited: true, wantStatus: "exit status 3"},
		{name: "envs and cwd", cmd: `echo "$FOO"; basename "$PWD"`, opts: envd.RunOptions{Envs: map[string]string{"FOO": "bar baz"}, Cwd: "/tmp"}, wantOut: "bar baz\ntmp\n", wantExited: true, wantStatus: "exit status 0"},
		{name: "argv missing binary", opts: envd.RunOptions{Argv: []string{"/no/such/binary"}}, wantErr: "/usr/bin/nice: '/no/such/binary': No such file or directory\n", wantCode: 127, wantExited: true, wantStatus: "exit status 127"},
		{name: "large output", cmd: "head -c 100000 /dev/zero | tr '\\0' x", wantOut: strings.Repeat("x", 100000), wantExited: true, wantStatus: "exit status 0"},
	}
	e := setup(t, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb syncBuffer
			tc.opts.Stdout, tc.opts.Stderr = &out, &errb
			res, err := e.c.Run(ctxT(t), tc.cmd, tc.opts)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := out.String(); got != tc.wantOut {
				t.Errorf("stdout = %q, want %q", got, tc.wantOut)
			}
			if got := errb.String(); got != tc.wantErr {
				t.Errorf("stderr = %q, want %q", got, tc.wantErr)
			}
			if res.PID == 0 || res.Exit == nil {
				t.Fatalf("result = %+v", res)
			}
			if res.Exit.ExitCode != tc.wantCode || res.Exit.Exited != tc.wantExited || res.Exit.Status != tc.wantStatus {
				t.Errorf("exit = %+v", res.Exit)
			}
		})
	}
}

func TestRunTimeoutKillsProcess(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	res, err := e.c.Run(ctx, "sleep 30", envd.RunOptions{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, envd.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want ErrDeadlineExceeded", err)
	}
	// The retained end event shows the kill.
	var st envd.RunResult
	eventually(t, "retained end event", func() bool {
		r, err := e.c.Attach(ctx, envd.Selector{PID: res.PID}, envd.RunOptions{})
		if err == nil && r.Exit != nil {
			st = *r
			return true
		}
		return false
	})
	if st.Exit.ExitCode != -1 || st.Exit.Status != "signal: killed" || st.Exit.Exited {
		t.Errorf("exit = %+v", st.Exit)
	}
}

func TestCallerDeadlineIsNotSent(t *testing.T) {
	e := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A caller deadline must not become Connect-Timeout-Ms: a 20 s ctx
	// deadline on a 0.3 s command leaves it to run to completion.
	res, err := e.c.Run(ctx, "sleep 0.3; echo done", envd.RunOptions{})
	if err != nil || res.ExitCode() != 0 {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
}

func TestStdinAndSignals(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	s, err := e.c.Start(ctx, envd.StartRequest{Cmd: "cat", Tag: "cat-stdin", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.Recv()
	if err != nil || ev.Type != envd.EventStart {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	pid := ev.PID
	procs, err := e.c.List(ctx)
	if err != nil || len(procs) != 1 || procs[0].Tag != "cat-stdin" || procs[0].PID != pid || procs[0].Cmd != "cat" {
		t.Fatalf("List = %+v, %v", procs, err)
	}
	if err := e.c.SendInput(ctx, envd.Selector{Tag: "cat-stdin"}, []byte("abc\n"), false); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Recv()
	if err != nil || ev.Type != envd.EventStdout || string(ev.Data) != "abc\n" {
		t.Fatalf("echo = %+v, %v", ev, err)
	}
	if err := e.c.CloseStdin(ctx, envd.Selector{PID: pid}); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Recv()
	if err != nil || ev.Type != envd.EventEnd || ev.Exit.ExitCode != 0 || !ev.Exit.Exited {
		t.Fatalf("end = %+v, %v", ev, err)
	}
	err = e.c.SendInput(ctx, envd.Selector{Tag: "cat-stdin"}, []byte("late\n"), false)
	if !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("SendInput after exit: %v, want ErrNotFound", err)
	}

	// stdin disabled → internal; SIGTERM by tag; signal after exit → not found.
	s2, err := e.c.Start(ctx, envd.StartRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "term"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	start, err := s2.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.SendInput(ctx, envd.Selector{PID: start.PID}, []byte("x"), false); !errors.Is(err, envd.ErrInternal) {
		t.Fatalf("SendInput stdin disabled: %v, want ErrInternal", err)
	}
	if err := e.c.SendSignal(ctx, envd.Selector{Tag: "term"}, envd.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev, err = s2.Recv()
	if err != nil || ev.Type != envd.EventEnd || ev.Exit.Status != "signal: terminated" || ev.Exit.ExitCode != -1 {
		t.Fatalf("end = %+v, %v", ev, err)
	}
	if err := e.c.SendSignal(ctx, envd.Selector{PID: start.PID}, envd.SIGKILL); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("SendSignal after exit: %v, want ErrNotFound", err)
	}
}

func TestConnectReattach(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	s, err := e.c.Start(ctx, envd.StartRequest{Cmd: "/bin/sh", Args: []string{"-c", "read x; echo got $x"}, Tag: "r", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	start, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // disconnecting does not kill the process
	var out syncBuffer
	done := make(chan error, 1)
	var res *envd.RunResult
	started := make(chan struct{})
	go func() {
		var err error
		res, err = e.c.Attach(ctx, envd.Selector{Tag: "r"}, envd.RunOptions{Stdout: &out, OnStart: func(uint32) { close(started) }})
		done <- err
	}()
	<-started
	if err := e.c.SendInput(ctx, envd.Selector{PID: start.PID}, []byte("hi\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out.String() != "got hi\n" || res.PID != start.PID || res.ExitCode() != 0 {
		t.Fatalf("out = %q, res = %+v", out.String(), res)
	}
	if _, err := e.c.Attach(ctx, envd.Selector{PID: 999999}, envd.RunOptions{}); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("Attach unknown pid: %v, want ErrNotFound", err)
	}
}

func TestPTY(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	s, err := e.c.Start(ctx, envd.StartRequest{Cmd: "/bin/sh", Args: []string{"-c", "tty -s && echo is-a-tty"}, PTY: &envd.PTYSize{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pty bytes.Buffer
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == envd.EventPTY {
			pty.Write(ev.Data)
		}
		if ev.Type == envd.EventEnd {
			break
		}
	}
	if pty.String() != "is-a-tty\r\n" {
		t.Fatalf("pty output = %q", pty.String())
	}
}

func TestFilesystem(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	created, dir, err := e.c.MakeDir(ctx, "/home/user/cap/a/b")
	if err != nil || !created || dir.Type != envd.FileTypeDirectory || dir.Path != "/home/user/cap/a/b" || dir.Name != "b" {
		t.Fatalf("MakeDir = %v %+v %v", created, dir, err)
	}
	if created, _, err := e.c.MakeDir(ctx, "/home/user/cap/a/b"); err != nil || created {
		t.Fatalf("MakeDir existing = %v, %v; want false, nil", created, err)
	}
	wi, err := e.c.Upload(ctx, "/home/user/cap/hello.txt", strings.NewReader("hello world\n"))
	if err != nil || len(wi) != 1 || wi[0].Path != "/home/user/cap/hello.txt" || wi[0].Name != "hello.txt" {
		t.Fatalf("Upload = %+v, %v", wi, err)
	}
	st, err := e.c.Stat(ctx, "~/cap/hello.txt")
	if err != nil || st.Size != 12 || st.Type != envd.FileTypeFile || st.Permissions != "-rw-r--r--" || st.Mode != 0o644 || st.ModifiedTime.IsZero() {
		t.Fatalf("Stat = %+v, %v", st, err)
	}
	if _, err := e.c.Stat(ctx, "/home/user/cap/nope"); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("Stat missing: %v", err)
	}
	list, err := e.c.ListDir(ctx, "/home/user/cap", 2)
	var paths []string
	for _, en := range list {
		paths = append(paths, en.Path)
	}
	if err != nil || strings.Join(paths, ",") != "/home/user/cap/a,/home/user/cap/a/b,/home/user/cap/hello.txt" {
		t.Fatalf("ListDir = %v, %v", paths, err)
	}
	if _, err := e.c.ListDir(ctx, "/home/user/nope", 1); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("ListDir missing: %v", err)
	}
	mv, err := e.c.Move(ctx, "/home/user/cap/hello.txt", "/home/user/cap/moved.txt")
	if err != nil || mv.Name != "moved.txt" {
		t.Fatalf("Move = %+v, %v", mv, err)
	}
	if _, err := e.c.Move(ctx, "/home/user/cap/hello.txt", "/x"); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("Move missing: %v", err)
	}
	var buf bytes.Buffer
	if n, err := e.c.Download(ctx, "/home/user/cap/moved.txt", &buf); err != nil || n != 12 || buf.String() != "hello world\n" {
		t.Fatalf("Download = %d %q %v", n, buf.String(), err)
	}
	if _, err := e.c.Download(ctx, "/home/user/cap/none", &buf); !errors.Is(err, envd.ErrNotFound) {
		t.Fatalf("Download missing: %v", err)
	}
	if _, err := e.c.Download(ctx, "/home/user/cap", &buf); !errors.Is(err, envd.ErrInvalidArgument) {
		t.Fatalf("Download dir: %v", err)
	}
	if err := e.c.Remove(ctx, "/home/user/cap/a"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Remove(ctx, "/home/user/cap/a"); err != nil {
		t.Fatalf("Remove missing: %v (envd succeeds)", err)
	}
	// The process sees the uploaded file in its cwd.
	var out syncBuffer
	if _, err := e.c.Run(ctx, "cat moved.txt", envd.RunOptions{Cwd: "/home/user/cap", Stdout: &out}); err != nil || out.String() != "hello world\n" {
		t.Fatalf("cat = %q, %v", out.String(), err)
	}
}

func TestHealthAndAuth(t *testing.T) {
	e := setup(t, nil)
	ctx := ctxT(t)
	if err := e.c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	bad, err := envd.New(envd.Config{BaseURL: e.fake.SandboxURL(), SandboxID: e.sb.SandboxID, AccessToken: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.List(ctx); !errors.Is(err, envd.ErrUnauthenticated) {
		t.Fatalf("List with a bad token: %v, want ErrUnauthenticated", err)
	}
	wrongUser, _ := envd.New(envd.Config{BaseURL: e.fake.SandboxURL(), SandboxID: e.sb.SandboxID, AccessToken: e.sb.EnvdAccessToken, User: "nosuchuser"})
	if _, err := wrongUser.List(ctx); !errors.Is(err, envd.ErrUnauthenticated) {
		t.Fatalf("List as unknown user: %v", err)
	}
	if _, err := wrongUser.Run(ctx, "true", envd.RunOptions{}); !errors.Is(err, envd.ErrUnauthenticated) {
		t.Fatalf("Run as unknown user: %v", err)
	}
	if _, err := e.api.Kill(ctx, e.sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Health(ctx); !errors.Is(err, envd.ErrSandboxGone) {
		t.Fatalf("Health after kill: %v, want ErrSandboxGone", err)
	}
	if _, err := e.c.List(ctx); !errors.Is(err, envd.ErrSandboxGone) {
		t.Fatalf("List after kill: %v, want ErrSandboxGone", err)
	}
	if _, err := e.c.Run(ctx, "true", envd.RunOptions{}); !errors.Is(err, envd.ErrSandboxGone) {
		t.Fatalf("Run after kill: %v, want ErrSandboxGone", err)
	}
	// The test sent bad credentials on purpose.
	e.fake.ResetDeviations()
}
