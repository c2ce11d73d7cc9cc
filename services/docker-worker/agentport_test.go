//go:build integration

package dockerworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/tunnel"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

const portsRouting = `default_class: standard
classes:
  standard: {backend: docker, image: "sandboxio/python:3.11"}
  hardened: {backend: docker, image: "sandboxio/python:3.11", runtime: runsc, require_isolation: gvisor}
`

// publishPorts writes ports into the sandbox's registry record (what the
// router's ports.expose keeps there) and returns the record.
func publishPorts(t *testing.T, env *sbxtest.Env, id string, ports ...int) events.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn("admin"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var rec events.Sandbox
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		rec.Ports = nil
		for _, p := range ports {
			rec.Ports = append(rec.Ports, events.PortExposure{Port: p, Access: events.PortPublic, ExposedAt: time.Now().UTC()})
		}
		b, _ := json.Marshal(rec)
		if _, err := kv.Update(ctx, id, b, e.Revision()); err == nil {
			return rec
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			t.Fatal(err)
		}
	}
}

// serveInSandbox runs argv in the sandbox until the test ends and waits
// until port accepts connections (through the agent).
func serveInSandbox(t *testing.T, b *Backend, id string, port int, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = b.Exec(ctx, id, worker.Process{ID: randID("p-"), Cmd: argv, Stdout: io.Discard, Stderr: io.Discard})
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 30*time.Second, fmt.Sprintf("port %d to accept connections", port), func() bool {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		c, err := b.DialPort(dctx, id, port)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
}

// httpThrough is an HTTP client whose connections are dialled through the
// tunnel to port of rec.
func httpThrough(d *tunnel.Dialer, rec events.Sandbox, port int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.Dial(ctx, rec, port) },
	}}
}

// TestPortsOverAgent: a deny-egress sandbox (runc and, where registered,
// gVisor) running python3 -m http.server is reached through the tunnel and
// the worker; an unpublished port is PortNotExposed and a published one
// where nothing listens PortUnreachable; the sandbox has no network
// besides lo all along.
func TestPortsOverAgent(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: portsRouting, Logger: testLogger(t)})
	classes := []string{"standard"}
	if _, ok := b.RuntimeTier(RuntimeRunsc); ok {
		classes = append(classes, "hardened")
	}
	d, err := tunnel.NewDialer(env.Conn("gateway"), tunnel.DialerConfig{SigningSeed: env.SigningSeed("gateway")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, class := range classes {
		t.Run(class, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := env.Client.Create(ctx, events.CreateRequest{Class: class, TimeoutS: 600,
				Network: &events.NetworkPolicy{Egress: events.EgressDeny}})
			if err != nil {
				t.Fatal(err)
			}
			if !sb.Capabilities.Has(events.CapPorts) {
				t.Fatalf("capabilities %v lack ports", sb.Capabilities)
			}
			serveInSandbox(t, b, sb.SandboxID, 8000, "python3", "-m", "http.server", "8000", "--directory", "/")
			rec := publishPorts(t, env, sb.SandboxID, 8000, 9000)
			if rec.Network == nil || rec.Network.Egress != events.EgressDeny {
				t.Fatalf("network %+v, want egress deny", rec.Network)
			}
			resp, err := httpThrough(d, rec, 8000).Get("http://sandbox/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
				t.Fatalf("GET /: %d %.200q", resp.StatusCode, body)
			}
			if _, err := d.Dial(ctx, rec, 8001); !errors.Is(err, events.ErrPortNotExposed) {
				t.Fatalf("unpublished port: %v", err)
			}
			forged := rec
			forged.Ports = append(forged.Ports, events.PortExposure{Port: 8001})
			if _, err := d.Dial(ctx, forged, 8001); !errors.Is(err, events.ErrPortNotExposed) {
				t.Fatalf("a port the registry does not publish: %v", err)
			}
			if _, err := d.Dial(ctx, rec, 9000); !errors.Is(err, events.ErrPortUnreachable) {
				t.Fatalf("nothing on the port: %v", err)
			}
			// The sandbox itself still has no route out.
			if out := sh(t, b, sb.SandboxID, `python3 -c "import socket; print([n for _, n in socket.if_nameindex()])"`); strings.TrimSpace(out) != "['lo']" {
				t.Fatalf("the sandbox's network: %q", out)
			}
		})
	}
}

// TestPortWorkerDiesMidTransfer: the worker is cut off the bus during a
// large download: the gateway's Read fails within its dead bound.
func TestPortWorkerDiesMidTransfer(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: portsRouting, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	// A server that sends without end.
	serveInSandbox(t, b, sb.SandboxID, 8000, "python3", "-c", `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000)); s.listen(8)
buf = b"x" * 65536
while True:
    c, _ = s.accept()
    try:
        while True: c.sendall(buf)
    except OSError:
        c.close()
`)
	rec := publishPorts(t, env, sb.SandboxID, 8000)
	d, err := tunnel.NewDialer(env.Conn("gateway"), tunnel.DialerConfig{SigningSeed: env.SigningSeed("gateway"),
		KeepAlive: 250 * time.Millisecond, DeadAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.Dial(ctx, rec, 8000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	env.CrashWorkers()
	start := time.Now()
	rerr := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, c); rerr <- err }()
	select {
	case err := <-rerr:
		if !errors.Is(err, tunnel.ErrPeerLost) {
			t.Fatalf("read: %v, want the peer lost", err)
		}
		t.Logf("the gateway's read failed %s after the worker was cut off", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway's read did not fail within 10 s of the worker's death")
	}
}

// Without the agent a sandbox's ports cannot be reached: the backend does
// not advertise them, and a dial is CapabilityNotSupported.
func TestPortsNeedTheAgent(t *testing.T) {
	b := newTestBackend(t, Config{Agent: AgentOff})
	if b.Info().Capabilities.Has(events.CapPorts) {
		t.Fatal("a backend without the agent advertises ports")
	}
	id := mustCreate(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.DialPort(ctx, id, 8000); !errors.Is(err, events.ErrCapabilityNotSupported) {
		t.Fatalf("dial without the agent: %v", err)
	}
	if _, err := b.DialPort(ctx, randID("sb-"), 8000); !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("dial of an unknown sandbox: %v", err)
	}
}
