package client_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestOnBehalfOf: on the account layout, a services-account user acting
// for tenant A is served as tenant A (the tenant's quota counts its
// sandbox, the sandbox is A's and not B's, its output reaches the front
// door); tenant B, naming A in the same header, is still tenant B (the
// server replaces a tenant's header) and reaches nothing of A's.
func TestOnBehalfOf(t *testing.T) {
	env := startAuthenticated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	accA := env.TenantAccount(authtest.TenantA)

	door, err := client.New(env.Connect(t, env.Creds(auth.RoleAdmin)), client.WithOnBehalfOf(accA),
		client.WithTeardownGrace(2*time.Second), client.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 15*time.Second, func() bool {
		b, err := door.Backends(ctx)
		return err == nil && len(b.Backends) > 0 && len(b.Backends[0].Workers) > 0
	}, "no live worker")
	if got := door.Tenant(); got != accA {
		t.Fatalf("front door acting for A is tenant %q, want %q", got, accA)
	}
	sb, err := door.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer door.Kill(context.Background(), sb.SandboxID)

	a := tenantClient(t, env, env.TenantCreds(authtest.TenantA))
	rec, err := a.Get(ctx, sb.SandboxID)
	if err != nil || rec.Tenant != accA {
		t.Fatalf("tenant A's view of the front door's sandbox: %+v, %v", rec, err)
	}
	if q, err := a.Quota(ctx); err != nil || q.Usage.Sandboxes != 1 {
		t.Fatalf("tenant A's quota does not count the front door's sandbox: %+v, %v", q, err)
	}
	p, err := door.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "through the door"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res := readAll(t, p); out != "through the door\n" || res.ExitCode != 0 {
		t.Fatalf("streamed output for the front door: %q exit %d", out, res.ExitCode)
	}

	b := tenantClient(t, env, env.TenantCreds(authtest.TenantB))
	if _, err := b.Get(ctx, sb.SandboxID); !errors.Is(err, events.ErrForbidden) {
		t.Fatalf("tenant B's get of A's sandbox: %v", err)
	}
	// Tenant B names A's account in the header itself.
	forger, err := client.Connect(env.URL, client.WithCreds(env.TenantCreds(authtest.TenantB)), client.WithOnBehalfOf(accA),
		client.WithTeardownGrace(2*time.Second), client.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	if got := forger.Tenant(); got != env.TenantAccount(authtest.TenantB) {
		t.Fatalf("tenant B claiming A is served as %q, want B's account", got)
	}
	for name, try := range map[string]func() error{
		"get": func() error { _, err := forger.Get(ctx, sb.SandboxID); return err },
		"exec": func() error {
			_, err := forger.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}})
			return err
		},
		"kill": func() error { _, err := forger.Kill(ctx, sb.SandboxID); return err },
	} {
		if err := try(); !errors.Is(err, events.ErrForbidden) {
			t.Errorf("tenant B claiming A, %s on A's sandbox: %v, want Forbidden", name, err)
		}
	}
	if list, err := forger.List(ctx, events.ListRequest{}); err != nil || len(list) != 0 {
		t.Fatalf("tenant B claiming A lists %d sandboxes, %v", len(list), err)
	}
}

func TestOnBehalfOfRefusesNonTenants(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	for _, acc := range []string{"", events.TenantOpen, "a.b", "a b", "*", ">"} {
		if _, err := client.New(env.Conn("x"), client.WithOnBehalfOf(acc)); err == nil {
			t.Errorf("WithOnBehalfOf(%q) accepted", acc)
		}
	}
}
