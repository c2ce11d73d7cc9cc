package failover

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bin is the sandboxio binary built by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sbx-failover-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sandboxio")
	build := exec.Command("go", "build", "-o", bin, "github.com/sandboxio/sandboxio/cmd/sandboxio")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sandboxio:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// full skips a scenario unless SBX_FAILOVER=1 (make failover).
func full(t *testing.T) {
	t.Helper()
	if os.Getenv("SBX_FAILOVER") != "1" {
		t.Skip("set SBX_FAILOVER=1 (make failover) to run this scenario")
	}
}

// proc is one sandboxio process: a role with its arguments. Its output goes
// to a file in the test's directory, printed when the test fails.
type proc struct {
	t    *testing.T
	name string
	args []string
	env  []string
	wrap []string // a command the process runs under (ip netns exec …), or nil
	log  string

	mu  sync.Mutex
	cmd *exec.Cmd
	end chan struct{}
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startProcIn(t, nil, name, env, args...)
}

// startProcIn starts the process under wrap (a command that execs its
// arguments, so the pid stays the process's).
func startProcIn(t *testing.T, wrap []string, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, env: env, wrap: wrap, log: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				t.Logf("---- %s (last 3000 bytes) ----\n%s", name, tail(b, 3000))
			}
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	argv := append(append(append([]string(nil), p.wrap...), bin), p.args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	end := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(end) }()
	p.mu.Lock()
	p.cmd, p.end = cmd, end
	p.mu.Unlock()
}

// signal sends sig to the process (its own pid only) and waits up to d for
// it to end; after d it is killed.
func (p *proc) signal(sig syscall.Signal, d time.Duration) {
	p.mu.Lock()
	cmd, end := p.cmd, p.end
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-end:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-end:
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-end
	}
}

// kill ends the process with SIGKILL: no shutdown, no goodbye.
func (p *proc) kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// stop ends the process with SIGTERM (a clean shutdown), bounded.
func (p *proc) stop() { p.signal(syscall.SIGTERM, 30*time.Second) }

// restart starts the same role again with the same arguments.
func (p *proc) restart() { p.start() }

func freePorts(t *testing.T, host string, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// natsNodes runs size `sandboxio nats-server` processes, a JetStream cluster
// when size > 1.
type natsNodes struct {
	procs []*proc
	urls  []string
}

func startNATS(t *testing.T, size int) *natsNodes {
	t.Helper()
	return startNATSOn(t, "127.0.0.1", size)
}

// startNATSOn is startNATS with the client port on host (routes stay on
// the loopback).
func startNATSOn(t *testing.T, host string, size int) *natsNodes {
	t.Helper()
	ports := append(freePorts(t, host, size), freePorts(t, "127.0.0.1", size)...)
	dir := t.TempDir()
	var routes []string
	for i := range size {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[size+i]))
	}
	n := &natsNodes{}
	for i := range size {
		name := fmt.Sprintf("n%d", i+1)
		args := []string{"nats-server", "--listen", net.JoinHostPort(host, strconv.Itoa(ports[i])),
			"--store-dir", filepath.Join(dir, name), "--server-name", name}
		if size > 1 {
			args = append(args, "--cluster-name", "sbx", "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[size+i]),
				"--routes", strings.Join(routes, ","))
		}
		n.procs = append(n.procs, startProc(t, "nats-"+name, nil, args...))
		n.urls = append(n.urls, "nats://"+net.JoinHostPort(host, strconv.Itoa(ports[i])))
	}
	return n
}

// URL is every node's client URL, comma-separated (what --nats takes).
func (n *natsNodes) URL() string { return strings.Join(n.urls, ",") }

// node returns the process of the node named name (n1, n2, …).
func (n *natsNodes) node(name string) *proc {
	for _, p := range n.procs {
		if p.name == "nats-"+name {
			return p
		}
	}
	return nil
}

// within runs f until it returns nil or d passes, every 100 ms.
func within(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var err error
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err = f(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond): // polling a process started by the harness
		}
	}
}
