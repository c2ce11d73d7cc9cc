package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// startAuthenticated runs a router and a fake worker with their own
// services-account credentials on a server with the account layout
// (internal/authtest): tenants connect as tenants do in production.
func startAuthenticated(t *testing.T) *authtest.Env {
	t.Helper()
	env := authtest.Start(t)
	log := slog.New(slog.DiscardHandler)
	routing, err := router.ParseRouting([]byte(sbxtest.DefaultRouting))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	rsvc, err := router.New(router.Config{Routing: routing, Bus: bus.Config{}, Logger: log}, env.Connect(t, env.Creds(auth.RoleRouter)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Bus: bus.Config{}, Logger: log, KillOnShutdown: true}, env.Connect(t, env.Creds(auth.RoleWorker)), fake.New(fake.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context) error{rsvc.Run, w.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				t.Errorf("service: %v", err)
			}
		}()
	}
	return env
}

func tenantClient(t *testing.T, env *authtest.Env, creds string) *client.Client {
	t.Helper()
	cl, err := client.Connect(env.URL, client.WithCreds(creds), client.WithTeardownGrace(2*time.Second),
		client.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestTenantOnRealAccounts: a tenant connected with its creds file (no
// JetStream, no KV, no object store) is told its tenant, creates a sandbox
// with sealed secrets, streams a process, attaches late, writes and reads
// a 2 MB file, and sees its quota; another tenant can reach none of it; an
// operator in the services account reads the same output by JetStream.
func TestTenantOnRealAccounts(t *testing.T) {
	env := startAuthenticated(t)
	a := tenantClient(t, env, env.TenantCreds(authtest.TenantA))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		b, err := a.Backends(ctx)
		return err == nil && len(b.Backends) > 0 && len(b.Backends[0].Workers) > 0
	}, "no live worker")
	if got, want := a.Tenant(), env.TenantAccount(authtest.TenantA); got != want {
		t.Fatalf("tenant %q, want %q", got, want)
	}

	const canary = "canary-1c9e44"
	sb, err := a.Create(ctx, events.CreateRequest{TimeoutS: 120, Secrets: map[string]string{"API_KEY": canary}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill(context.Background(), sb.SandboxID)
	res, err := a.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"env", "API_KEY"}})
	if err != nil || string(res.Stdout) != canary+"\n" {
		t.Fatalf("sealed secret in the sandbox: %q, %v", res.Stdout, err)
	}

	p, err := a.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"interleave", "50"}})
	if err != nil {
		t.Fatal(err)
	}
	out, errout, r := readAll(t, p)
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if out != wantOut.String() || errout != wantErr.String() || r.ExitCode != 0 {
		t.Fatalf("stream: stdout %q stderr %q exit %d", out, errout, r.ExitCode)
	}
	late, err := a.Attach(ctx, sb.SandboxID, p.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if out2, errout2, _ := readAll(t, late); out2 != out || errout2 != errout {
		t.Fatalf("late attach: stdout %q stderr %q", out2, errout2)
	}

	data := make([]byte, 2<<20)
	_, _ = rand.Read(data)
	start := time.Now()
	if err := a.WriteFile(ctx, sb.SandboxID, "/tmp/big.bin", data, 0); err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	start = time.Now()
	back, err := a.ReadFile(ctx, sb.SandboxID, "/tmp/big.bin")
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("2 MB file: %d bytes back, %v", len(back), err)
	}
	t.Logf("tenant 2 MB file: write %v, read %v", wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	q, err := a.Quota(ctx)
	if err != nil || q.Tenant != env.TenantAccount(authtest.TenantA) || q.Usage.Sandboxes < 1 {
		t.Fatalf("quota: %+v, %v", q, err)
	}

	// Tenant B reaches nothing of A's: each refusal says the same.
	b := tenantClient(t, env, env.TenantCreds(authtest.TenantB))
	refusals := 0
	for name, try := range map[string]func() error{
		"attach": func() error { _, err := b.Attach(ctx, sb.SandboxID, p.ProcessID); return err },
		"read":   func() error { _, err := b.ReadFile(ctx, sb.SandboxID, "/tmp/big.bin"); return err },
		"write":  func() error { return b.WriteFile(ctx, sb.SandboxID, "/tmp/x", data, 0) },
		"list":   func() error { _, err := b.ListFiles(ctx, sb.SandboxID, "/tmp"); return err },
		"stream": func() error {
			_, err := b.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "x"}})
			return err
		},
		"get": func() error { _, err := b.Get(ctx, sb.SandboxID); return err },
	} {
		if err := try(); !errors.Is(err, events.ErrForbidden) {
			t.Errorf("tenant B %s on A's sandbox: %v", name, err)
		} else {
			refusals++
		}
	}
	t.Logf("tenant B refused %d of 6 operations on tenant A's sandbox", refusals)

	// An operator (services account, JetStream) reads the same output.
	op := tenantClient(t, env, env.Creds(auth.RoleAdmin))
	if op.Tenant() != events.TenantOpen || op.UsesAPIPaths() {
		t.Fatalf("operator: tenant %q, api paths %v", op.Tenant(), op.UsesAPIPaths())
	}
	pa, err := op.Attach(ctx, sb.SandboxID, p.ProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if out3, _, _ := readAll(t, pa); out3 != out {
		t.Fatalf("operator attach: %q", out3)
	}
}

// TestRevokedCredentials: credentials revoked while connected end the
// connection after a couple of refused reconnects (no retry storm), and a
// new Connect with them fails at once naming the creds file; expired
// credentials likewise.
func TestRevokedCredentials(t *testing.T) {
	env := authtest.Start(t)
	creds, user := env.IssueUser(t, authtest.TenantA, auth.UserOptions{Name: "short-lived"})
	var mu sync.Mutex
	var refusals int
	closed := make(chan struct{})
	cl, err := client.Connect(env.URL, client.WithCreds(creds), client.WithLogger(slog.New(slog.DiscardHandler)),
		client.WithNATSOptions(
			nats.ReconnectWait(50*time.Millisecond),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthRevoked) {
					mu.Lock()
					refusals++
					mu.Unlock()
				}
			}),
			nats.ClosedHandler(func(*nats.Conn) { close(closed) })))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	env.Revoke(t, authtest.TenantA, user)
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the connection kept reconnecting with revoked credentials")
	}
	mu.Lock()
	n := refusals
	mu.Unlock()
	if n > 5 {
		t.Fatalf("%d refused reconnects: a retry storm", n)
	}
	t.Logf("revoked while connected: closed after %d refused attempts", n)

	start := time.Now()
	_, err = client.Connect(env.URL, client.WithCreds(creds))
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), creds) {
		t.Fatalf("connect with revoked creds: %v", err)
	}
	expired, _ := env.IssueUser(t, authtest.TenantA, auth.UserOptions{Name: "expired", Expires: time.Now().Add(-time.Minute)})
	_, err = client.Connect(env.URL, client.WithCreds(expired))
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), expired) {
		t.Fatalf("connect with expired creds: %v", err)
	}
	t.Logf("revoked and expired creds refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestTenantDoesNotPingRouters (execs of 50 ms, the fake's sleep in ms, each
// outliving the 20 ms loss check): a tenant may not publish to $SRV subjects,
// so a tenant's client must not ping the router instances (every ping was
// a permissions violation on its connection, printed every two seconds in
// every tenant's process). The client learns who it is first.
func TestTenantDoesNotPingRouters(t *testing.T) {
	env := startAuthenticated(t)
	// The deployment is up before the tenant's client starts: one that
	// asks while no router answers cannot know it is a tenant, and pings.
	admin := tenantClient(t, env, env.Creds(auth.RoleAdmin))
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		b, err := admin.Backends(context.Background())
		return err == nil && len(b.Backends) > 0 && len(b.Backends[0].Workers) > 0
	}, "no live worker")
	var mu sync.Mutex
	var violations []string
	nc := env.Connect(t, env.TenantCreds(authtest.TenantA), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			mu.Lock()
			violations = append(violations, err.Error())
			mu.Unlock()
		}
	}))
	cl, err := client.New(nc, client.WithLostCheck(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil {
		t.Fatal(err)
	}
	cl.RefreshRouters()
	for range 3 {
		if _, err := cl.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"sleep", "50"}}); err != nil {
			t.Fatal(err)
		}
	}
	// A violation comes back asynchronously: a round trip after the last
	// ping has seen it if there was one.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Errorf("%d permissions violations on the tenant's connection, the first: %s", len(violations), violations[0])
	}
}
