package authtest

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// The example tenants every Env has.
const (
	TenantA = "tenant-a"
	TenantB = "tenant-b"
)

// Env is a running server with the account layout.
type Env struct {
	// Dir is the layout directory (creds, keys, config).
	Dir    string
	Layout *auth.Layout
	// URL is the server's client URL (nats://127.0.0.1:PORT).
	URL    string
	Server *embednats.Server
	// ServerConfig started Server: a restart with it keeps the store.
	ServerConfig embednats.Config

	mu      sync.Mutex
	tenants map[string]*auth.Tenant
	admin   jetstream.JetStream // nil until Start has made the bus
}

// Start starts the server and stops it at the test's cleanup.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := t.TempDir()
	l, _, err := auth.Init(filepath.Join(dir, "auth"))
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Dir: l.Dir, Layout: l, tenants: map[string]*auth.Tenant{}}
	ta, err := auth.AddTenant(l.Dir, TenantA, events.TenantLimits{})
	if err != nil {
		t.Fatal(err)
	}
	e.tenants[TenantA] = ta
	e.ServerConfig = embednats.Config{ConfigFile: l.ConfigFile(), StoreDir: filepath.Join(dir, "js"),
		Host: "127.0.0.1", Port: -1, ServerName: "authtest"}
	srv, err := embednats.Start(e.ServerConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Server.Stop() })
	e.Server = srv
	e.URL = srv.ClientURL()
	e.AddTenant(t, TenantB, events.TenantLimits{})

	admin := e.Connect(t, e.Creds(auth.RoleAdmin))
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureWithRetry(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("authtest: bus.Ensure as admin: %v", err)
	}
	e.admin = js
	for _, name := range []string{TenantA, TenantB} {
		e.storeRecord(t, e.tenant(name))
	}
	return e
}

func (e *Env) storeRecord(t testing.TB, tn *auth.Tenant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := auth.StoreRecord(ctx, e.admin, tn.Record, 1); err != nil {
		t.Fatalf("authtest: tenant record of %s: %v", tn.Name, err)
	}
}

// Creds is the creds file of a services role: auth.RoleRouter,
// RoleWorker, RoleAuditor, RoleReaper, RoleAdmin, or RoleSys.
func (e *Env) Creds(role string) string { return e.Layout.Creds(role) }

// TenantCreds is the creds file of a tenant's user.
func (e *Env) TenantCreds(name string) string { return e.tenant(name).Creds }

// TenantAccount is a tenant's account public key: the tenant id the
// router sees in Nats-Request-Info and the token in its subjects.
func (e *Env) TenantAccount(name string) string { return e.tenant(name).Account }

// Tenant is a tenant as auth.AddTenant made it.
func (e *Env) Tenant(name string) *auth.Tenant { return e.tenant(name) }

func (e *Env) tenant(name string) *auth.Tenant {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.tenants[name]
	if !ok {
		panic("authtest: no tenant " + name)
	}
	return t
}

// AddTenant creates another tenant, pushes its account to the running
// server and stores its record (limits) in sbx_tenants.
func (e *Env) AddTenant(t testing.TB, name string, limits events.TenantLimits) *auth.Tenant {
	t.Helper()
	tn, err := auth.AddTenant(e.Dir, name, limits)
	if err != nil {
		t.Fatal(err)
	}
	e.Push(t, tn.JWT)
	e.mu.Lock()
	e.tenants[name] = tn
	e.mu.Unlock()
	if e.admin != nil {
		e.storeRecord(t, tn)
	}
	return tn
}

// Push sends an account JWT to the server with the SYS user's creds.
func (e *Env) Push(t testing.TB, accountJWT string) {
	t.Helper()
	sys := e.Connect(t, e.Creds(auth.RoleSys))
	defer sys.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := auth.Push(ctx, sys, accountJWT); err != nil {
		t.Fatal(err)
	}
}

// Connect connects with a creds file, closes the connection at cleanup,
// and fails the test if the server refuses it. Permission violations are
// recorded: see Errors.
func (e *Env) Connect(t testing.TB, creds string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := e.Dial(creds, opts...)
	if err != nil {
		t.Fatalf("authtest: connect with %s: %v", creds, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Dial connects with a creds file and returns the error instead of failing
// (for tests of refused credentials). It never retries.
func (e *Env) Dial(creds string, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.UserCredentials(creds), nats.Name("authtest-" + filepath.Base(creds)),
		nats.Timeout(5 * time.Second), nats.MaxReconnects(0), nats.ErrorHandler(recordErrors)}
	return nats.Connect(e.URL, append(base, opts...)...)
}

// errs holds the asynchronous errors of every connection, by connection.
var errs sync.Map // *nats.Conn -> *connErrs

type connErrs struct {
	mu   sync.Mutex
	list []error
}

func recordErrors(nc *nats.Conn, _ *nats.Subscription, err error) {
	v, _ := errs.LoadOrStore(nc, &connErrs{})
	ce := v.(*connErrs)
	ce.mu.Lock()
	ce.list = append(ce.list, err)
	ce.mu.Unlock()
}

// Errors returns the asynchronous errors (permission violations…) the
// server sent nc so far, for a connection made by Connect or Dial.
func Errors(nc *nats.Conn) []error {
	v, ok := errs.Load(nc)
	if !ok {
		return nil
	}
	ce := v.(*connErrs)
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return append([]error(nil), ce.list...)
}

// WaitDenied waits (up to within) for the server to report a permission
// violation on nc naming subject, and reports whether it did. Use it after
// a Publish or Subscribe that must be refused.
func WaitDenied(nc *nats.Conn, subject string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		for _, err := range Errors(nc) {
			if IsPermissionViolation(err) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling the error list, with a deadline
	}
}

// IsPermissionViolation reports whether err is the server refusing a
// publish or subscribe.
func IsPermissionViolation(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation)
}

// IssueUser writes creds for another user of a tenant (opts.Expires in the
// past makes credentials the server refuses) and returns the creds path
// and the user's public key.
func (e *Env) IssueUser(t testing.TB, tenant string, opts auth.UserOptions) (creds, user string) {
	t.Helper()
	creds = filepath.Join(t.TempDir(), tenant+"-"+opts.Name+".creds")
	user, err := auth.IssueUser(e.Dir, tenant, creds, opts)
	if err != nil {
		t.Fatal(err)
	}
	return creds, user
}

// Revoke revokes a tenant's user and pushes the account: the server cuts
// the user's connections and refuses new ones.
func (e *Env) Revoke(t testing.TB, tenant, user string) {
	t.Helper()
	accJWT, err := auth.RevokeUser(e.Dir, tenant, user)
	if err != nil {
		t.Fatal(err)
	}
	e.Push(t, accJWT)
}

// EnsureBus brings the streams and buckets to c as the admin (the owner),
// for a test that changes them (e.g. SBX_OUT's byte limit): the services
// may not update streams in this layout.
func (e *Env) EnsureBus(t testing.TB, c bus.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.Owner = true
	if err := bus.EnsureWithRetry(ctx, e.admin, c); err != nil {
		t.Fatalf("authtest: bus.Ensure as admin: %v", err)
	}
}
