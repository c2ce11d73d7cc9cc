package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	pid := startServing(t)
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
// frame in the netpoller, on its stdio channel and on its socket channel
// alike: no thread of it sits in read(2). A blocked read holds the agent's
// only processor, which the runtime's monitor takes back on every exec
// (ADR 28).
func TestServeReadsWithoutAThread(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/syscall"); err != nil {
		t.Skip("no /proc/PID/task/TID/syscall:", err)
	}
	for _, channel := range []string{"stdio", "socket"} {
		t.Run(channel, func(t *testing.T) {
			var env []string
			if channel == "socket" {
				conn := listenOnce(t, filepath.Join(t.TempDir(), "agent.sock"))
				env = append(env, "SBX_AGENT_TEST_CONNECT="+conn.path)
				defer conn.close()
			}
			pid := startServing(t, env...)
			err := poll.Until(context.Background(), 10*time.Second, func() error {
				environ, err := os.ReadFile("/proc/" + pid + "/environ")
				if err != nil {
					return err
				}
				if !strings.Contains(string(environ), timerslack.Env+"=") {
					return errors.New("not executed again yet")
				}
				tasks, err := os.ReadDir("/proc/" + pid + "/task")
				if err != nil {
					return err
				}
				if len(tasks) < 3 {
					return fmt.Errorf("%d threads: not serving yet", len(tasks))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// Serving, it must wait in the netpoller: a blocked read shows
			// within the second.
			var blocked error
			_ = poll.Until(context.Background(), time.Second, func() error {
				blocked = readingThread(pid)
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

// startServing starts the agent's serve (TestMain) with env added, its
// stdin held open so that it keeps serving, and returns its pid; the test's
// end kills it.
func startServing(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "SBX_AGENT_TEST_SERVE=1"), env...)
	cmd.Dir = t.TempDir()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = stdin.Close() })
	return strconv.Itoa(cmd.Process.Pid)
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
	go func() {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if err != nil {
			c = -1
		}
		p.conn <- c
	}()
	return p
}

func (p *socketPeer) close() {
	_ = unix.Shutdown(p.ln, unix.SHUT_RDWR)
	_ = unix.Close(p.ln)
	if c := <-p.conn; c >= 0 {
		_ = unix.Close(c)
	}
}
