package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// rig is a real nats-server (listening on loopback), a worker's Server
// whose Open dials a loopback port of the host, and a gateway's Dialer, each
// on its own NATS connection.
type rig struct {
	t      testing.TB
	ns     *embednats.Server
	wnc    *nats.Conn
	gnc    *nats.Conn
	srv    *Server
	dialer *Dialer
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

type rigOptions struct {
	open   func(ctx context.Context, o events.TunnelOpen) (net.Conn, error)
	verify func(subject string, h nats.Header, data []byte) error
	server ServerConfig
	dialer DialerConfig
}

// hostOpen is an Open that dials the host's loopback port: the test's
// stand-in for a sandbox's agent.
func hostOpen(_ context.Context, o events.TunnelOpen) (net.Conn, error) {
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", o.Port))
	if err != nil {
		return nil, events.Errorf(events.CodePortUnreachable, "port %d: %v", o.Port, err)
	}
	return c, nil
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	ns, err := embednats.Start(embednats.Config{Host: "127.0.0.1", Port: -1, ServerName: "tun-test", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ns: ns, done: make(chan struct{})}
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.Name(name), nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	r.wnc, r.gnc = connect("worker"), connect("gateway")
	sc := o.server
	sc.Backend, sc.Worker = "docker", "w1"
	sc.Open = o.open
	if sc.Open == nil {
		sc.Open = hostOpen
	}
	sc.Verify = o.verify
	if r.srv, err = NewServer(r.wnc, sc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { defer close(r.done); _ = r.srv.Run(ctx) }()
	if r.dialer, err = NewDialer(r.gnc, o.dialer); err != nil {
		t.Fatal(err)
	}
	// The server's subscriptions are in place once a ping round-trips.
	if err := r.wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if r.srv.Ready() {
			return nil
		}
		return errors.New("server not subscribed")
	})
	t.Cleanup(r.close)
	return r
}

func (r *rig) close() {
	r.once.Do(func() {
		_ = r.dialer.Close()
		r.stop()
		<-r.done
		r.wnc.Close()
		r.gnc.Close()
		r.ns.Stop()
	})
}

func record(port int) events.Sandbox {
	return events.Sandbox{SandboxID: "sb1", Backend: "docker", Worker: "w1", State: events.StateRunning, Tenant: "open",
		Ports: []events.PortExposure{{Port: port, Access: events.PortPublic}}}
}

// waitFor polls f until it returns nil, failing the test after d with f's
// last error.
func waitFor(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tcpServer serves each connection with serve on a loopback port.
func tcpServer(t testing.TB, serve func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

func echo(c net.Conn) {
	_, _ = io.Copy(c, c)
	_ = c.(*net.TCPConn).CloseWrite()
}

// 8 MiB each way, with half-close both ways: every byte in order, and the
// returned connection half-closes.
func TestTunnelEcho(t *testing.T) {
	port := tcpServer(t, echo)
	r := newRig(t, rigOptions{})
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the connection has no CloseWrite")
	}
	want := make([]byte, 8<<20)
	_, _ = rand.Read(want)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = cw.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes, equal %v, err %v", len(got), len(want), bytes.Equal(got, want), err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

func TestTunnelRefusals(t *testing.T) {
	refusing := func(e *events.Error) func(context.Context, events.TunnelOpen) (net.Conn, error) {
		return func(context.Context, events.TunnelOpen) (net.Conn, error) { return nil, e }
	}
	tests := []struct {
		name string
		open func(context.Context, events.TunnelOpen) (net.Conn, error)
		sb   func(events.Sandbox) events.Sandbox
		want error
	}{
		{"not in the record the gateway read", nil, func(sb events.Sandbox) events.Sandbox { sb.Ports = nil; return sb }, events.ErrPortNotExposed},
		{"invalid record", nil, func(sb events.Sandbox) events.Sandbox { sb.Worker = "a.b"; return sb }, events.ErrPortNotExposed},
		{"ended", nil, func(sb events.Sandbox) events.Sandbox { sb.State = events.StateGone; return sb }, events.ErrSandboxGone},
		{"worker says not exposed", refusing(events.Errorf(events.CodePortNotExposed, "no")), nil, events.ErrPortNotExposed},
		{"worker says not supported", refusing(events.Errorf(events.CodeCapabilityNotSupp, "no")), nil, events.ErrCapabilityNotSupported},
		{"nothing listens", nil, nil, events.ErrPortUnreachable},
		{"no worker", nil, func(sb events.Sandbox) events.Sandbox { sb.Worker = "w2"; return sb }, events.ErrWorkerTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{open: tc.open})
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			port := ln.Addr().(*net.TCPAddr).Port
			_ = ln.Close()
			sb := record(port)
			if tc.sb != nil {
				sb = tc.sb(sb)
			}
			start := time.Now()
			_, err := r.dialer.Dial(context.Background(), sb, port)
			if !errors.Is(err, tc.want) {
				t.Fatalf("dial: %v, want %v", err, tc.want)
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("answered after %s", time.Since(start))
			}
			if n := r.dialer.Conns(); n != 0 {
				t.Fatalf("%d connections left on the dialer", n)
			}
		})
	}
}

// A worker that takes the open and never answers: WorkerTimeout after the
// open's bound.
func TestTunnelOpenTimeout(t *testing.T) {
	r := newRig(t, rigOptions{dialer: DialerConfig{OpenTimeout: 300 * time.Millisecond}})
	sub, err := r.wnc.Subscribe(events.TunnelOpenSubject("docker", "mute"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = r.wnc.Flush()
	sb := record(80)
	sb.Worker = "mute"
	if _, err := r.dialer.Dial(context.Background(), sb, 80); !errors.Is(err, events.ErrWorkerTimeout) {
		t.Fatalf("dial: %v", err)
	}
}

// A gateway that does not read: the worker stops at the window, the
// gateway holds at most the window, and everything arrives once it reads.
func TestTunnelSlowReader(t *testing.T) {
	const total = 16 << 20
	sent := make(chan int, 1)
	port := tcpServer(t, func(c net.Conn) {
		n, _ := io.Copy(c, io.LimitReader(zeros{}, total))
		sent <- int(n)
	})
	r := newRig(t, rigOptions{})
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*Conn)
	// The worker sends its window, then waits for credit.
	waitFor(t, 5*time.Second, func() error {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		if tc.rbytes < DefaultWindow {
			return fmt.Errorf("%d bytes buffered", tc.rbytes)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // let anything past the window arrive, if it were sent
	tc.mu.Lock()
	buffered := tc.rbytes
	tc.mu.Unlock()
	if buffered > DefaultWindow {
		t.Fatalf("the gateway holds %d bytes, over the window %d", buffered, DefaultWindow)
	}
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != total {
		t.Fatalf("read %d bytes, %v", n, err)
	}
	if got := <-sent; got != total {
		t.Fatalf("server sent %d", got)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// The worker's NATS connection dies mid-transfer: the gateway's Read fails
// within the dead bound, and nothing is left running on the gateway.
func TestTunnelWorkerDies(t *testing.T) {
	port := tcpServer(t, func(c net.Conn) { _, _ = io.Copy(c, zeros{}) })
	r := newRig(t, rigOptions{dialer: DialerConfig{KeepAlive: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond}})
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	r.wnc.Close() // the worker's process, as NATS sees it
	start := time.Now()
	rerr := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, c); rerr <- err }()
	select {
	case err := <-rerr:
		if !errors.Is(err, ErrPeerLost) {
			t.Fatalf("read: %v, want ErrPeerLost", err)
		}
		t.Logf("the gateway noticed after %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("the gateway's read did not fail within 3 s")
	}
	waitFor(t, 2*time.Second, func() error {
		if n := r.dialer.Conns(); n != 0 {
			return fmt.Errorf("%d connections", n)
		}
		return nil
	})
}

// The gateway dies: the worker ends the connection and the port's
// connection within the dead bound.
func TestTunnelGatewayDies(t *testing.T) {
	ended := make(chan struct{}, 1)
	port := tcpServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); ended <- struct{}{} })
	r := newRig(t, rigOptions{server: ServerConfig{KeepAlive: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond}})
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	r.gnc.Close()
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the port's connection did not end within 3 s")
	}
	waitFor(t, 2*time.Second, func() error {
		if n := r.srv.Conns(); n != 0 {
			return fmt.Errorf("%d connections on the worker", n)
		}
		return nil
	})
}

// A connection that carries nothing ends after the idle bound; pings do
// not count.
func TestTunnelIdle(t *testing.T) {
	port := tcpServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	r := newRig(t, rigOptions{dialer: DialerConfig{KeepAlive: 50 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}})
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, ErrIdle) || time.Since(start) > 2*time.Second {
		t.Fatalf("read: %v after %s, want ErrIdle", err, time.Since(start))
	}
}

// 1,000 connections at once through one worker, each echoing its own
// bytes: none lost.
func TestTunnelThousand(t *testing.T) {
	port := tcpServer(t, echo)
	r := newRig(t, rigOptions{})
	const n = 1000
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := r.dialer.Dial(context.Background(), record(port), port)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			msg := bytes.Repeat([]byte{byte(i)}, 1000+i)
			if _, err := c.Write(msg); err != nil {
				errs <- err
				return
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("conn %d: echo mismatch (%v)", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if a, b := r.dialer.Conns(), r.srv.Conns(); a+b != 0 {
			return fmt.Errorf("%d connections on the gateway, %d on the worker", a, b)
		}
		return nil
	})
}

// Every goroutine ends: after connections, a dialer and a server have
// closed, the count is back where it was.
func TestTunnelNoGoroutineLeft(t *testing.T) {
	port := tcpServer(t, echo)
	before := runtime.NumGoroutine()
	r := newRig(t, rigOptions{})
	for range 20 {
		c, err := r.dialer.Dial(context.Background(), record(port), port)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("x"))
		_, _ = c.Read(make([]byte, 1))
		_ = c.Close()
	}
	r.close()
	waitFor(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	})
}

// Frames that break the tunnel's rules end the connection with ErrBroken,
// whoever publishes them: a gap in the sequence (a dropped frame), bytes
// past the window, an unknown or malformed frame.
func TestTunnelBrokenFrames(t *testing.T) {
	port := tcpServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	seqFrame := func(seq uint32, n int) []byte {
		b := append([]byte{frameData, 0, 0, 0, 0}, make([]byte, n)...)
		b[1], b[2], b[3], b[4] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
		return b
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
	}{
		{"a gap", [][]byte{seqFrame(2, 10)}},
		{"past the window", func() [][]byte {
			var fs [][]byte
			for i := range DefaultWindow/MaxChunk + 1 {
				fs = append(fs, seqFrame(uint32(i+1), MaxChunk))
			}
			return fs
		}()},
		{"unknown type", [][]byte{{'Z'}}},
		{"short data", [][]byte{{frameData, 0, 0}}},
		{"short window", [][]byte{{frameWindow, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			c, err := r.dialer.Dial(context.Background(), record(port), port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			subject := events.TunnelGatewaySubject(r.dialer.id, c.(*Conn).id)
			for _, f := range tc.frames {
				if err := r.wnc.Publish(subject, f); err != nil {
					t.Fatal(err)
				}
			}
			_ = r.wnc.Flush()
			// Nothing is read before: reading grants credit.
			select {
			case <-c.(*Conn).Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the connection took the frames")
			}
			if _, err := io.Copy(io.Discard, c); !errors.Is(err, ErrBroken) {
				t.Fatalf("read: %v, want ErrBroken", err)
			}
		})
	}
}

// An open put back on the worker's subject (a replay) is refused and
// leaves the connection it copied working; an open the Verify hook refuses
// never dials.
func TestTunnelReplayAndVerify(t *testing.T) {
	port := tcpServer(t, echo)
	dials := make(chan struct{}, 10)
	open := func(ctx context.Context, o events.TunnelOpen) (net.Conn, error) {
		dials <- struct{}{}
		return hostOpen(ctx, o)
	}
	r := newRig(t, rigOptions{open: open})
	spy := make(chan *nats.Msg, 1)
	sub, err := r.wnc.ChanSubscribe(events.TunnelOpenSubject("docker", "w1"), spy)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = r.wnc.Flush()
	c, err := r.dialer.Dial(context.Background(), record(port), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := <-spy
	<-dials
	replay := nats.NewMsg(m.Subject)
	replay.Reply, replay.Header, replay.Data = m.Reply, m.Header, m.Data
	if err := r.gnc.PublishMsg(replay); err != nil {
		t.Fatal(err)
	}
	_ = r.gnc.Flush()
	if _, err := c.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "still here" {
		t.Fatalf("after a replay: %q, %v", got, err)
	}
	select {
	case <-dials:
		t.Fatal("the replayed open dialled")
	default:
	}

	rv := newRig(t, rigOptions{open: open, verify: func(string, nats.Header, []byte) error {
		return events.Errorf(events.CodeUnauthorized, "no")
	}})
	if _, err := rv.dialer.Dial(context.Background(), record(port), port); !errors.Is(err, events.ErrUnauthorized) {
		t.Fatalf("refused by verify: %v", err)
	}
	select {
	case <-dials:
		t.Fatal("an open refused by Verify dialled")
	default:
	}
}
