package auth

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func TestInitWritesTheLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	l, wrote, err := Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	secrets := 0
	for _, w := range wrote {
		st, err := os.Stat(w.Path)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if w.Secret {
			want = 0o600
			secrets++
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", w.Path, st.Mode().Perm(), want)
		}
	}
	t.Logf("Init wrote %d files, %d of them secrets (mode 0600)", len(wrote), secrets)
	for _, role := range Roles {
		if _, err := os.Stat(l.Creds(role)); err != nil {
			t.Errorf("creds of %s: %v", role, err)
		}
	}
	// The port link key the routers and the gateways share.
	if k, err := portauth.LoadKey(l.PortLinkKeyFile()); err != nil || len(k) != portauth.KeySize {
		t.Errorf("port link key: %d bytes, %v", len(k), err)
	}
	signers, err := os.ReadFile(l.SignersFile())
	if err != nil || len(strings.Fields(string(signers))) != len(DefaultWorkers)+1 {
		t.Fatalf("signers.txt: %q %v", signers, err)
	}
	// The reaper's seed is written too, and its public key is trusted.
	rseed, err := os.ReadFile(l.SigningKeyFile(ReaperSigner))
	if err != nil {
		t.Fatal(err)
	}
	rkp, err := nkeys.FromSeed(bytes.TrimSpace(rseed))
	if err != nil {
		t.Fatalf("signing-reaper.nk: %v", err)
	}
	if rpub, _ := rkp.PublicKey(); !nkeys.IsValidPublicUserKey(rpub) || !slices.Contains(strings.Fields(string(signers)), rpub) {
		t.Fatalf("the reaper's key %s is not a user key in signers.txt %q", rpub, signers)
	}
	if _, _, err := InitWorkers(t.TempDir(), []string{ReaperSigner}); !errors.Is(err, ErrBadName) {
		t.Errorf("a worker named %q: %v, want ErrBadName", ReaperSigner, err)
	}
	// commanders.txt: the router's and the reaper's keys, and only those;
	// the router signs no records.
	commanders, err := os.ReadFile(l.CommandersFile())
	if err != nil {
		t.Fatal(err)
	}
	qseed, err := os.ReadFile(l.SigningKeyFile(RouterSigner))
	if err != nil {
		t.Fatal(err)
	}
	qkp, err := nkeys.FromSeed(bytes.TrimSpace(qseed))
	if err != nil {
		t.Fatalf("signing-router.nk: %v", err)
	}
	qpub, _ := qkp.PublicKey()
	rpub, _ := rkp.PublicKey()
	gpub := pubOf(t, l.SigningKeyFile(GatewaySigner))
	if got := strings.Fields(string(commanders)); !slices.Equal(got, []string{rpub, qpub, gpub}) {
		t.Fatalf("commanders.txt = %q, want the reaper's %s, the router's %s and the gateway's %s", got, rpub, qpub, gpub)
	}
	if slices.Contains(strings.Fields(string(signers)), qpub) {
		t.Errorf("the router's key is in signers.txt")
	}
	if _, _, err := InitWorkers(t.TempDir(), []string{RouterSigner}); !errors.Is(err, ErrBadName) {
		t.Errorf("a worker named %q: %v, want ErrBadName", RouterSigner, err)
	}
	// The configuration is what a stock nats-server reads.
	opts, err := server.ProcessConfigFile(l.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if opts.SystemAccount != l.SYS || len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != l.Operator {
		t.Fatalf("config: system account %q, operators %d", opts.SystemAccount, len(opts.TrustedOperators))
	}
	if _, ok := opts.AccountResolver.(*server.DirAccResolver); !ok {
		t.Fatalf("resolver %T, want a full (directory) resolver", opts.AccountResolver)
	}
	// The SVC account's exports validate and guard the tenant streams.
	b, _ := os.ReadFile(l.accountFile(SVCName, ".jwt"))
	ac, err := jwt.DecodeAccountClaims(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var vr jwt.ValidationResults
	ac.Validate(&vr)
	if len(vr.Issues) > 0 {
		t.Fatalf("SVC claims: %v", vr.Issues)
	}
	if _, _, err := Init(dir); !errors.Is(err, ErrExists) {
		t.Fatalf("second Init: %v, want ErrExists", err)
	}
	l2, err := Load(dir)
	if err != nil || *l2 != *l {
		t.Fatalf("Load: %+v %v", l2, err)
	}
}

func TestAddTenant(t *testing.T) {
	dir := t.TempDir()
	if _, err := AddTenant(dir, "a", events.TenantLimits{}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("AddTenant before Init: %v", err)
	}
	if _, _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "A", "a.b", "a b", "../x", strings.Repeat("x", 65)} {
		if _, err := AddTenant(dir, bad, events.TenantLimits{}); !errors.Is(err, ErrBadName) {
			t.Errorf("AddTenant(%q): %v, want ErrBadName", bad, err)
		}
	}
	tn, err := AddTenant(dir, "team-a", events.TenantLimits{MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddTenant(dir, "team-a", events.TenantLimits{}); !errors.Is(err, ErrExists) {
		t.Fatalf("second AddTenant: %v", err)
	}
	ac, err := jwt.DecodeAccountClaims(tn.JWT)
	if err != nil {
		t.Fatal(err)
	}
	var vr jwt.ValidationResults
	ac.Validate(&vr)
	if len(vr.Issues) > 0 {
		t.Fatalf("tenant claims: %v", vr.Issues)
	}
	if ac.Limits.JetStreamLimits.IsUnlimited() || ac.Limits.JetStreamLimits.DiskStorage != 0 {
		t.Fatalf("a tenant has JetStream: %+v", ac.Limits.JetStreamLimits)
	}
	if len(ac.Imports) != 4 {
		t.Fatalf("imports: %d", len(ac.Imports))
	}
	got, err := LoadTenant(dir, "team-a")
	if err != nil || got.Account != tn.Account || got.Record.Limits.MaxSandboxes != 3 || got.User != tn.User {
		t.Fatalf("LoadTenant: %+v %v", got, err)
	}
	all, err := Tenants(dir)
	if err != nil || len(all) != 1 {
		t.Fatalf("Tenants: %v %v", all, err)
	}
	st, _ := os.Stat(tn.Creds)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("tenant creds mode %v", st.Mode().Perm())
	}
}

func TestTenantsBucketIsTheBusOne(t *testing.T) {
	kc := TenantsBucketConfig(3)
	if kc.Bucket != events.BucketTenants || kc.History != 1 || kc.TTL != 0 || kc.Replicas != 3 {
		t.Fatalf("%+v", kc)
	}
}
