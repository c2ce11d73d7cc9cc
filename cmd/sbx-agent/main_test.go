package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/timerslack"
)

// TestMain runs the agent itself when asked to by TestServeOutlivesItsStdin.
func TestMain(m *testing.M) {
	if os.Getenv("SBX_AGENT_TEST_SERVE") == "1" {
		os.Args = []string{"sbx-agent", "serve"}
		if c := os.Getenv("SBX_AGENT_TEST_CONNECT"); c != "" {
			os.Args = append(os.Args, "--connect", c)
		}
		if n := os.Getenv("SBX_AGENT_TEST_PROCS"); n != "" {
			os.Args = append(os.Args, "--procs", n)
		}
		if f := os.Getenv("SBX_AGENT_TEST_CRASH_FILE"); f != "" {
			os.Args = append(os.Args, "--crash-file", f)
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// TestServeOutlivesItsStdin: an agent whose stdin ends with no process
// running keeps the sandbox alive (the worker falls back to Docker exec).
// With every goroutine parked on a channel, the runtime would call it a
// deadlock and exit, and the container with it.
func TestServeOutlivesItsStdin(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SBX_AGENT_TEST_SERVE=1")
	cmd.Dir = t.TempDir()
	out, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out // stdin: /dev/null, ended at once
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("the agent exited (%v) once its stdin ended:\n%s", err, b)
	case <-time.After(2 * time.Second): // it must still be serving
	}
	_ = cmd.Process.Kill()
	<-exited
}

// TestServeRelaxesTimers: a serving agent runs every thread, the runtime's
// monitor among them, with timerslack.Relaxed's timer slack (it executes itself
// again to get it from its first thread), under its own name.
func TestServeRelaxesTimers(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/timerslack_ns"); err != nil {
		t.Skip("no timerslack_ns:", err)
	}
	pid := startServing(t, false).pid
	want := strconv.Itoa(int(timerslack.Relaxed))
	name := filepath.Base(os.Args[0])
	if len(name) > 15 {
		name = name[:15]
	}
	err := poll.Until(context.Background(), 10*time.Second, func() error {
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(comm)); got != name {
			return fmt.Errorf("named %q, want %q", got, name)
		}
		tasks, err := os.ReadDir("/proc/" + pid + "/task")
		if err != nil {
			return err
		}
		if len(tasks) < 3 {
			return fmt.Errorf("%d threads: not serving yet", len(tasks))
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(string(b)); got != want {
				return fmt.Errorf("thread %s: slack %s ns, want %s", task.Name(), got, want)
			}
		}
		env, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			return err
		}
		if !strings.Contains(string(env), timerslack.Env+"=") {
			return errors.New("not executed again")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestServeReadsWithoutAThread: a serving agent waits for the worker's next
// frame in the netpoller, on its stdio channel (also when its stdin came
// non-blocking, which package os has put in the netpoller already) and on
// its socket channel alike: it answers a Hello (with the processors it was
// given), and then no thread of it sits in read(2). A blocked read holds a
// processor of the agent, which the runtime's monitor takes back on every
// exec (ADR 28).
func TestServeReadsWithoutAThread(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/syscall"); err != nil {
		t.Skip("no /proc/PID/task/TID/syscall:", err)
	}
	for _, channel := range []string{"stdio", "stdio, non-blocking", "socket"} {
		t.Run(channel, func(t *testing.T) {
			env := []string{"SBX_AGENT_TEST_PROCS=1"}
			var peer *socketPeer
			if channel == "socket" {
				peer = listenOnce(t, filepath.Join(t.TempDir(), "agent.sock"))
				env = append(env, "SBX_AGENT_TEST_CONNECT="+peer.path)
			}
			a := startServing(t, channel == "stdio, non-blocking", env...)
			in, out := io.Writer(a.in), io.Reader(a.out)
			if peer != nil {
				conn := peer.accept(t)
				in, out = conn, conn
			}
			if h := hello(t, in, out); h.Procs != 1 {
				t.Fatalf("the agent says it runs on %d processors, want 1", h.Procs)
			}
			// Serving, it must wait in the netpoller: a blocked read shows
			// within the second.
			var blocked error
			_ = poll.Until(context.Background(), time.Second, func() error {
				blocked = readingThread(a.pid)
				if blocked != nil {
					return nil
				}
				return errors.New("no thread in read(2) yet")
			})
			if blocked != nil {
				t.Fatal(blocked)
			}
		})
	}
}

// servingAgent is an agent serving on stdio pipes held by the test.
type servingAgent struct {
	pid string
	in  io.Writer // its stdin
	out io.Reader // its stdout
}

// startServing starts the agent's serve (TestMain) with env added, on pipes
// held open so that it keeps serving (its stdin non-blocking from the start
// if asked); the test's end kills it.
func startServing(t *testing.T, nonblockingStdin bool, env ...string) *servingAgent {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "SBX_AGENT_TEST_SERVE=1"), env...)
	cmd.Dir = t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	if nonblockingStdin {
		// A File made from a descriptor that is non-blocking already is
		// handed over as it is (exec's Fd makes a pipe of os.Pipe blocking).
		fd, err := unix.FcntlInt(r.Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
		nb := os.NewFile(uintptr(fd), "stdin")
		defer nb.Close()
		cmd.Stdin = nb
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = w.Close() })
	return &servingAgent{pid: strconv.Itoa(cmd.Process.Pid), in: w, out: stdout}
}

// hello does the worker's handshake, Sync and a Hello, on a channel and
// returns the agent's Hello.
func hello(t *testing.T, w io.Writer, r io.Reader) proto.Hello {
	t.Helper()
	payload, err := json.Marshal(proto.Hello{Version: proto.Version, Nonce: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	msg := append(append([]byte(nil), proto.Sync...), proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: payload})...)
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	type reply struct {
		h   proto.Hello
		err error
	}
	got := make(chan reply, 1)
	go func() { // ends with the agent, at the latest
		fr := proto.NewReader(bufio.NewReader(r))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				got <- reply{err: err}
				return
			}
			if f.Type == proto.THello {
				h, err := proto.DecodeHello(f.Payload)
				got <- reply{h, err}
				return
			}
		}
	}()
	select {
	case r := <-got:
		if r.err != nil || r.h.Nonce != "n1" {
			t.Fatalf("hello: %+v %v", r.h, r.err)
		}
		return r.h
	case <-time.After(10 * time.Second):
		t.Fatal("no hello within 10 s")
	}
	return proto.Hello{}
}

// readingThread names a thread of pid that is blocked in read(2), or nil.
func readingThread(pid string) error {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/syscall")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 1 && f[0] == strconv.Itoa(unix.SYS_READ) {
			return fmt.Errorf("thread %s blocked in read(2) on descriptor %s", task.Name(), f[1])
		}
	}
	return nil
}

// socketPeer is a listener that accepts one agent and holds its connection.
type socketPeer struct {
	path string
	ln   int
	conn chan int
}

func listenOnce(t *testing.T, path string) *socketPeer {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	p := &socketPeer{path: path, ln: fd, conn: make(chan int, 1)}
	t.Cleanup(p.close)
	go func() {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if err != nil {
			c = -1
		}
		p.conn <- c
	}()
	return p
}

// accept is the agent's connection, once it has connected.
func (p *socketPeer) accept(t *testing.T) *os.File {
	t.Helper()
	select {
	case c := <-p.conn:
		if c < 0 {
			t.Fatal("accept failed")
		}
		f := os.NewFile(uintptr(c), "agent")
		t.Cleanup(func() { _ = f.Close() })
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not connect within 10 s")
	}
	return nil
}

func (p *socketPeer) close() {
	_ = unix.Shutdown(p.ln, unix.SHUT_RDWR)
	_ = unix.Close(p.ln)
}
