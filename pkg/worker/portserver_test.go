package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/tunnel"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// echoOn serves an echo (with half-close) on port 8000 of every fake
// sandbox; nothing listens elsewhere.
func echoOn(_ string, port int) func(net.Conn) {
	if port != 8000 {
		return nil
	}
	return func(c net.Conn) {
		_, _ = io.Copy(c, c)
		_ = c.(interface{ CloseWrite() error }).CloseWrite()
	}
}

// publish writes ports into the sandbox's registry record, as the router's
// ports.expose does, and returns the record.
func publish(t *testing.T, env *sbxtest.Env, id string, ports ...int) events.Sandbox {
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

func newDialer(t *testing.T, env *sbxtest.Env, seed []byte) *tunnel.Dialer {
	t.Helper()
	d, err := tunnel.NewDialer(env.Conn("gateway"), tunnel.DialerConfig{SigningSeed: seed, KeepAlive: 100 * time.Millisecond, DeadAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// gatewaySeed is the key a gateway signs its opens with: in the
// authenticated layout, a key the workers trust for ports.open only.
func gatewaySeed(env *sbxtest.Env) []byte { return env.SigningSeed("gateway") }

// TestPortThroughWorker: a published port of a fake sandbox is reached
// through the worker; every way the open is not what the registry says is
// PortNotExposed, whatever the gateway's copy of the record claims; a port
// where nothing listens is PortUnreachable.
func TestPortThroughWorker(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{Serve: echoOn})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	rec := publish(t, env, sb.ID(), 8000, 9000)
	d := newDialer(t, env, gatewaySeed(env))

	c, err := d.Dial(ctx, rec, 8000)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.(interface{ CloseWrite() error }).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	_ = c.Close()

	forged := func(f func(*events.Sandbox)) events.Sandbox {
		r := rec
		r.Ports = append([]events.PortExposure(nil), rec.Ports...)
		r.Ports = append(r.Ports, events.PortExposure{Port: 8001, Access: events.PortPublic})
		f(&r)
		return r
	}
	tests := []struct {
		name string
		sb   events.Sandbox
		port int
		want error
	}{
		{"a port the registry does not publish", forged(func(*events.Sandbox) {}), 8001, events.ErrPortNotExposed},
		{"an unknown sandbox", forged(func(r *events.Sandbox) { r.SandboxID = events.NewID() }), 8000, events.ErrPortNotExposed},
		{"another tenant's claim", forged(func(r *events.Sandbox) { r.Tenant = "someone-else" }), 8000, events.ErrPortNotExposed},
		{"published, nothing listens", rec, 9000, events.ErrPortUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := d.Dial(ctx, tc.sb, tc.port); !errors.Is(err, tc.want) {
				t.Fatalf("dial: %v, want %v", err, tc.want)
			}
		})
	}
	if n := d.Conns(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

// A killed sandbox ends its connections: the gateway's Read fails within
// a bound.
func TestPortEndsWithSandbox(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{Serve: echoOn})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	rec := publish(t, env, sb.ID(), 8000)
	d := newDialer(t, env, gatewaySeed(env))
	c, err := d.Dial(ctx, rec, 8000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	rerr := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 10)); rerr <- err }()
	select {
	case err := <-rerr:
		if !errors.Is(err, events.ErrSandboxGone) {
			t.Fatalf("read after the kill: %v, want SandboxGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection outlived its sandbox by 5 s")
	}
	if _, err := d.Dial(ctx, rec, 8000); err == nil {
		t.Fatal("dial of a killed sandbox succeeded")
	}
}

// Under the account layout, the workers obey only opens signed by a key
// whose scope allows ports.open: unsigned, and signed by the reaper's key
// (scoped to kill), are refused.
func TestPortOpenSigned(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{Serve: echoOn}), Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	rec := publish(t, env, sb.ID(), 8000)
	for _, tc := range []struct {
		name string
		seed []byte
		want error
	}{
		{"unsigned", nil, events.ErrUnauthorized},
		{"the reaper's key", env.SigningSeed("reaper"), events.ErrForbidden},
		{"the gateway's key", gatewaySeed(env), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newDialer(t, env, tc.seed).Dial(ctx, rec, 8000)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				_ = c.Close()
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("dial: %v, want %v", err, tc.want)
			}
		})
	}
}

// A port the operator reserved is never dialled, even when the record
// publishes it.
func TestPortReservedByTheWorker(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{Serve: echoOn}),
		Worker: func(c *worker.Config) { c.ReservedPorts = []int{8000} }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	rec := publish(t, env, sb.ID(), 8000)
	if _, err := newDialer(t, env, gatewaySeed(env)).Dial(ctx, rec, 8000); !errors.Is(err, events.ErrPortReserved) {
		t.Fatalf("dial of a reserved port: %v", err)
	}
}
