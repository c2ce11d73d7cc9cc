package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Names of the operator and the fixed accounts.
const (
	OperatorName = "sandboxio"
	SYSName      = "SYS"
	SVCName      = "SVC"
)

// Roles: the users of the services account (and "sys" of the system
// account), each written to creds/<role>.creds.
const (
	RoleSys     = "sys"
	RoleRouter  = "router"
	RoleWorker  = "worker"
	RoleAuditor = "auditor"
	RoleReaper  = "reaper"
	RoleAdmin   = "admin"
)

// Roles lists every role Init writes creds for.
var Roles = []string{RoleSys, RoleRouter, RoleWorker, RoleAuditor, RoleReaper, RoleAdmin, RoleGateway, RoleE2B}

// DefaultWorkers are the workers Init writes a record-signing seed for.
var DefaultWorkers = []string{"docker", "e2b", "fake"}

// ReaperSigner names the reaper's record-signing seed, which Init writes
// besides the workers' (SigningKeyFile(ReaperSigner), keys/signing-reaper.nk;
// the reaper's --signing-key), its public key in signers.txt. No worker may
// take the name.
const ReaperSigner = "reaper"

// RouterSigner names the router's command-signing seed
// (SigningKeyFile(RouterSigner), keys/signing-router.nk; the router's
// --signing-key). Its public key and the reaper's are in commanders.txt
// (the workers' --trusted-commanders). No worker may take the name.
const RouterSigner = "router"

// AuditorSigner names the auditor's checkpoint-signing seed
// (SigningKeyFile(AuditorSigner), keys/signing-auditor.nk; the auditor's
// --signing-key); its public key is in AuditorsFile (audit verify's
// --auditor-keys). No worker may take the name.
const AuditorSigner = "auditor"

// APIResponseThreshold is how long the server keeps a tenant's request
// answerable: longer than the longest exec (a sandbox's lifetime, at most
// events.MaxLifetimeSeconds) plus margin, so that the reply to a long exec
// is still delivered.
const APIResponseThreshold = time.Duration(events.MaxLifetimeSeconds)*time.Second + time.Hour

// Errors.
var (
	// ErrExists: Init on a directory that already holds a layout, or
	// AddTenant of a name that exists.
	ErrExists = errors.New("auth: already exists")
	// ErrNotInitialized: the directory holds no layout (run auth init).
	ErrNotInitialized = errors.New("auth: not initialized")
	// ErrBadName: a tenant or worker name outside [a-z0-9_-]{1,64}.
	ErrBadName = errors.New("auth: bad name")
)

// File modes: seeds and creds are secrets.
const (
	secretMode    = 0o600
	publicMode    = 0o644
	dirMode       = 0o700 // directories holding secrets
	publicDirMode = 0o755 // the layout itself and the resolver directory
)

// Layout is an initialized directory.
type Layout struct {
	Dir string // absolute
	// Public keys.
	Operator string
	SYS      string
	SVC      string
}

// Paths inside a layout.
func (l *Layout) ConfigFile() string  { return filepath.Join(l.Dir, "nats-server.conf") }
func (l *Layout) ResolverDir() string { return filepath.Join(l.Dir, "resolver") }
func (l *Layout) OperatorJWTFile() string {
	return filepath.Join(l.Dir, "operator.jwt")
}
func (l *Layout) operatorSeedFile() string { return filepath.Join(l.Dir, "operator.nk") }
func (l *Layout) accountFile(name, ext string) string {
	return filepath.Join(l.Dir, "accounts", name+ext)
}
func (l *Layout) tenantFile(name, ext string) string {
	return filepath.Join(l.Dir, "accounts", "tenants", name+ext)
}

// Creds is the creds file of a role (see Roles).
func (l *Layout) Creds(role string) string { return filepath.Join(l.Dir, "creds", role+".creds") }

// TenantCreds is the creds file of a tenant's first user.
func (l *Layout) TenantCreds(name string) string {
	return filepath.Join(l.Dir, "creds", "tenants", name+".creds")
}

// SealKeyFile holds the backends' xkey seed (SX…).
func (l *Layout) SealKeyFile() string { return filepath.Join(l.Dir, "keys", "seal.xk") }

// PortLinkKeyFile holds the port link key the routers and the gateways
// sign and check private ports' links and cookies with (internal/portauth).
func (l *Layout) PortLinkKeyFile() string { return filepath.Join(l.Dir, "keys", "port-link.key") }

// EnsurePortLinkKey writes the port link key into the layout at dir when
// it has none (a layout written before the key existed); written says
// whether it did.
func EnsurePortLinkKey(dir string) (written bool, err error) {
	l := &Layout{Dir: dir}
	if _, err := os.Stat(l.PortLinkKeyFile()); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("auth: %w", err)
	}
	k, err := portauth.NewKey()
	if err != nil {
		return false, fmt.Errorf("auth: port link key: %w", err)
	}
	if err := writeFile(l.PortLinkKeyFile(), portauth.MarshalKey(k), true); err != nil {
		return false, err
	}
	return true, nil
}

// SigningKeyFile holds a worker's record-signing nkey seed (SU…).
func (l *Layout) SigningKeyFile(worker string) string {
	return filepath.Join(l.Dir, "keys", "signing-"+worker+".nk")
}

// SignersFile lists the workers' public signing keys, one a line.
func (l *Layout) SignersFile() string { return filepath.Join(l.Dir, "keys", "signers.txt") }

// AuditorsFile lists the auditor's public checkpoint-signing keys, one a
// line (audit verify --auditor-keys).
func (l *Layout) AuditorsFile() string { return filepath.Join(l.Dir, "keys", "auditors.txt") }

// CommandersFile lists the public keys whose commands workers run (the
// router's and the reaper's), one a line.
func (l *Layout) CommandersFile() string { return filepath.Join(l.Dir, "keys", "commanders.txt") }

// Written lists every file Init wrote, for printing.
type Written struct {
	Path   string
	Secret bool
	What   string
}

// Init creates a new layout in dir (created if missing) with the default
// workers' signing keys. It refuses a directory that already holds one
// (ErrExists).
func Init(dir string) (*Layout, []Written, error) {
	return InitWorkers(dir, DefaultWorkers)
}

// InitWorkers is Init with one record-signing key per named worker.
func InitWorkers(dir string, workers []string) (*Layout, []Written, error) {
	return InitWith(dir, InitOptions{Workers: workers})
}

// InitOptions adjust Init.
type InitOptions struct {
	// Workers to write a record-signing key for (default DefaultWorkers).
	Workers []string
	// ResolverDir is the resolver directory written into the server
	// configuration, e.g. a path on each cluster node's own volume
	// (default: the layout's resolver directory). Every account is also
	// preloaded from the configuration, so a node with an empty resolver
	// directory starts with all of them.
	ResolverDir string
}

// InitWith is Init with options.
func InitWith(dir string, o InitOptions) (*Layout, []Written, error) {
	workers := o.Workers
	if workers == nil {
		workers = DefaultWorkers
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	l := &Layout{Dir: abs}
	if _, err := os.Stat(l.operatorSeedFile()); err == nil {
		return nil, nil, fmt.Errorf("%w: %s holds a layout (operator.nk)", ErrExists, abs)
	}
	for _, w := range workers {
		if !validName(w) || w == ReaperSigner || w == RouterSigner || w == AuditorSigner || w == GatewaySigner {
			return nil, nil, fmt.Errorf("%w: worker %q", ErrBadName, w)
		}
	}
	var out []Written
	wrote := func(p string, secret bool, what string) { out = append(out, Written{p, secret, what}) }

	okp, err := nkeys.CreateOperator()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: operator key: %w", err)
	}
	l.Operator, _ = okp.PublicKey()
	sysKP, err := nkeys.CreateAccount()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: account key: %w", err)
	}
	l.SYS, _ = sysKP.PublicKey()
	svcKP, err := nkeys.CreateAccount()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: account key: %w", err)
	}
	l.SVC, _ = svcKP.PublicKey()

	oc := jwt.NewOperatorClaims(l.Operator)
	oc.Name = OperatorName
	oc.SystemAccount = l.SYS
	opJWT, err := oc.Encode(okp)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: operator jwt: %w", err)
	}

	sysc := jwt.NewAccountClaims(l.SYS)
	sysc.Name = SYSName
	sysJWT, err := sysc.Encode(okp)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: SYS jwt: %w", err)
	}
	svcJWT, err := svcClaims(l.SVC).Encode(okp)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: SVC jwt: %w", err)
	}

	if err := os.MkdirAll(abs, publicDirMode); err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	for _, f := range []struct {
		path   string
		data   []byte
		secret bool
		what   string
	}{
		{l.operatorSeedFile(), seedOf(okp), true, "operator seed"},
		{l.OperatorJWTFile(), []byte(opJWT), false, "operator JWT"},
		{l.accountFile(SYSName, ".nk"), seedOf(sysKP), true, "SYS account seed"},
		{l.accountFile(SYSName, ".jwt"), []byte(sysJWT), false, "SYS account JWT"},
		{l.accountFile(SVCName, ".nk"), seedOf(svcKP), true, "SVC account seed"},
		{l.accountFile(SVCName, ".jwt"), []byte(svcJWT), false, "SVC account JWT"},
		{filepath.Join(l.ResolverDir(), l.SYS+".jwt"), []byte(sysJWT), false, "resolver: SYS"},
		{filepath.Join(l.ResolverDir(), l.SVC+".jwt"), []byte(svcJWT), false, "resolver: SVC"},
	} {
		if err := writeFile(f.path, f.data, f.secret); err != nil {
			return nil, nil, err
		}
		wrote(f.path, f.secret, f.what)
	}

	for _, role := range Roles {
		issuer, perms := svcKP, rolePermissions(role)
		if role == RoleSys {
			issuer = sysKP
		}
		creds, _, err := newUserCreds(issuer, role, perms, time.Time{})
		if err != nil {
			return nil, nil, err
		}
		if err := writeFile(l.Creds(role), creds, true); err != nil {
			return nil, nil, err
		}
		wrote(l.Creds(role), true, role+" user creds")
	}

	xk, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: seal key: %w", err)
	}
	if err := writeFile(l.SealKeyFile(), seedOf(xk), true); err != nil {
		return nil, nil, err
	}
	wrote(l.SealKeyFile(), true, "backends' seal xkey seed")
	linkKey, err := portauth.NewKey()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: port link key: %w", err)
	}
	if err := writeFile(l.PortLinkKeyFile(), portauth.MarshalKey(linkKey), true); err != nil {
		return nil, nil, err
	}
	wrote(l.PortLinkKeyFile(), true, "port link key of the routers and the gateways (--port-link-key-file)")
	var signers, commanders, scopes []string
	for _, w := range append(append([]string(nil), workers...), ReaperSigner, RouterSigner, GatewaySigner) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, nil, fmt.Errorf("auth: signing key: %w", err)
		}
		pub, _ := kp.PublicKey()
		if w != RouterSigner && w != GatewaySigner { // they sign commands and opens, not records
			signers = append(signers, pub)
		}
		if w == ReaperSigner || w == RouterSigner || w == GatewaySigner {
			commanders = append(commanders, pub)
		}
		if w == ReaperSigner {
			scopes = append(scopes, pub+" "+strings.Join(ReaperCommandScope, ","))
		}
		if w == GatewaySigner {
			scopes = append(scopes, pub+" "+strings.Join(GatewayCommandScope, ","))
		}
		if err := writeFile(l.SigningKeyFile(w), seedOf(kp), true); err != nil {
			return nil, nil, err
		}
		what := "record-signing seed of worker " + w
		switch w {
		case ReaperSigner:
			what = "record- and command-signing seed of the reaper"
		case RouterSigner:
			what = "command-signing seed of the router"
		case GatewaySigner:
			what = "open-signing seed of the ports gateway"
		}
		wrote(l.SigningKeyFile(w), true, what)
	}
	akp, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, fmt.Errorf("auth: signing key: %w", err)
	}
	apub, _ := akp.PublicKey()
	if err := writeFile(l.SigningKeyFile(AuditorSigner), seedOf(akp), true); err != nil {
		return nil, nil, err
	}
	wrote(l.SigningKeyFile(AuditorSigner), true, "checkpoint-signing seed of the auditor")
	if err := writeFile(l.AuditorsFile(), []byte(apub+"\n"), false); err != nil {
		return nil, nil, err
	}
	wrote(l.AuditorsFile(), false, "the auditor's checkpoint keys (audit verify --auditor-keys)")
	if err := writeFile(l.SignersFile(), []byte(strings.Join(signers, "\n")+"\n"), false); err != nil {
		return nil, nil, err
	}
	wrote(l.SignersFile(), false, "trusted record signers")
	if err := writeFile(l.CommandersFile(), []byte(strings.Join(commanders, "\n")+"\n"), false); err != nil {
		return nil, nil, err
	}
	wrote(l.CommandersFile(), false, "trusted command signers")
	if err := writeFile(l.CommandScopesFile(), []byte(strings.Join(scopes, "\n")+"\n"), false); err != nil {
		return nil, nil, err
	}
	wrote(l.CommandScopesFile(), false, "what each scoped command signer may command")

	settings, _ := json.Marshal(layoutSettings{ResolverDir: o.ResolverDir})
	if err := writeFile(filepath.Join(l.Dir, "layout.json"), append(settings, '\n'), false); err != nil {
		return nil, nil, err
	}
	if err := writeConfig(l); err != nil {
		return nil, nil, err
	}
	wrote(l.ConfigFile(), false, "nats-server configuration")
	return l, out, nil
}

// Load opens an initialized layout.
func Load(dir string) (*Layout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	l := &Layout{Dir: abs}
	okp, err := readSeed(l.operatorSeedFile())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no operator.nk (run sandboxio auth init --dir %s)", ErrNotInitialized, abs, dir)
		}
		return nil, err
	}
	l.Operator, _ = okp.PublicKey()
	for _, a := range []struct {
		name string
		pub  *string
	}{{SYSName, &l.SYS}, {SVCName, &l.SVC}} {
		kp, err := readSeed(l.accountFile(a.name, ".nk"))
		if err != nil {
			return nil, err
		}
		*a.pub, _ = kp.PublicKey()
	}
	return l, nil
}

// Tenant is a tenant account with its first user.
type Tenant struct {
	Name    string
	Account string // the account public key: the tenant id the router sees
	User    string // the user public key
	Creds   string // path of the user's creds file
	JWT     string // the account JWT
	Record  events.TenantRecord
}

// AddTenant creates tenant account name (a name in [a-z0-9_-]) with one
// user, writes its JWT into the resolver directory and returns it; push
// it to a running server with Push. A name that exists is ErrExists.
func AddTenant(dir, name string, limits events.TenantLimits) (*Tenant, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: tenant %q: use 1 to 64 of [a-z0-9_-]", ErrBadName, name)
	}
	l, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(l.tenantFile(name, ".nk")); err == nil {
		return nil, fmt.Errorf("%w: tenant %q", ErrExists, name)
	}
	okp, err := readSeed(l.operatorSeedFile())
	if err != nil {
		return nil, err
	}
	akp, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("auth: account key: %w", err)
	}
	apub, _ := akp.PublicKey()
	ac := tenantClaims(apub, name, l.SVC)
	accJWT, err := ac.Encode(okp)
	if err != nil {
		return nil, fmt.Errorf("auth: tenant %s jwt: %w", name, err)
	}
	creds, upub, err := newUserCreds(akp, name, tenantPermissions(apub), time.Time{})
	if err != nil {
		return nil, err
	}
	rec := events.TenantRecord{ID: apub, Name: name, Limits: limits, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	recJSON, _ := json.MarshalIndent(rec, "", "  ")
	for _, f := range []struct {
		path   string
		data   []byte
		secret bool
	}{
		{l.tenantFile(name, ".nk"), seedOf(akp), true},
		{l.tenantFile(name, ".jwt"), []byte(accJWT), false},
		{l.tenantFile(name, ".json"), append(recJSON, '\n'), false},
		{filepath.Join(l.ResolverDir(), apub+".jwt"), []byte(accJWT), false},
		{l.TenantCreds(name), creds, true},
	} {
		if err := writeFile(f.path, f.data, f.secret); err != nil {
			return nil, err
		}
	}
	if err := writeConfig(l); err != nil {
		return nil, err
	}
	return &Tenant{Name: name, Account: apub, User: upub, Creds: l.TenantCreds(name), JWT: accJWT, Record: rec}, nil
}

// LoadTenant reads a tenant that AddTenant created.
func LoadTenant(dir, name string) (*Tenant, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: tenant %q", ErrBadName, name)
	}
	l, err := Load(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(l.tenantFile(name, ".json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("auth: no tenant %q in %s: %w", name, l.Dir, err)
		}
		return nil, fmt.Errorf("auth: %w", err)
	}
	var rec events.TenantRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("auth: tenant %s record: %w", name, err)
	}
	accJWT, err := os.ReadFile(l.tenantFile(name, ".jwt"))
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	t := &Tenant{Name: name, Account: rec.ID, Creds: l.TenantCreds(name), JWT: string(accJWT), Record: rec}
	if uc, err := readCredsUser(t.Creds); err == nil {
		t.User = uc
	}
	return t, nil
}

// Tenants lists the tenants of a layout, by name.
func Tenants(dir string) ([]*Tenant, error) {
	l, err := Load(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(l.Dir, "accounts", "tenants"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("auth: %w", err)
	}
	var out []*Tenant
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		t, err := LoadTenant(dir, name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// UserOptions shape an extra tenant user.
type UserOptions struct {
	// Name of the user (default the tenant's name).
	Name string
	// Expires, when set, is when the user's JWT stops being accepted (a
	// time in the past issues credentials the server refuses).
	Expires time.Time
}

// IssueUser writes creds for another user of tenant name at path and
// returns the user's public key.
func IssueUser(dir, name, path string, opts UserOptions) (string, error) {
	l, err := Load(dir)
	if err != nil {
		return "", err
	}
	akp, err := readSeed(l.tenantFile(name, ".nk"))
	if err != nil {
		return "", err
	}
	apub, _ := akp.PublicKey()
	if opts.Name == "" {
		opts.Name = name
	}
	creds, upub, err := newUserCreds(akp, opts.Name, tenantPermissions(apub), opts.Expires)
	if err != nil {
		return "", err
	}
	if err := writeFile(path, creds, true); err != nil {
		return "", err
	}
	return upub, nil
}

// RevokeUser revokes every JWT of user userPub of tenant name issued up to
// now: it re-signs the tenant's account JWT with the revocation, writes it
// (tenant file and resolver) and returns it for Push.
func RevokeUser(dir, name, userPub string) (string, error) {
	l, err := Load(dir)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(l.tenantFile(name, ".jwt"))
	if err != nil {
		return "", fmt.Errorf("auth: tenant %s: %w", name, err)
	}
	ac, err := jwt.DecodeAccountClaims(string(b))
	if err != nil {
		return "", fmt.Errorf("auth: tenant %s jwt: %w", name, err)
	}
	if !nkeys.IsValidPublicUserKey(userPub) {
		return "", fmt.Errorf("%w: user key %q", ErrBadName, userPub)
	}
	// Revocation covers JWTs issued at or before the given time; a second
	// in the future covers one issued in this very second.
	ac.RevokeAt(userPub, time.Now().Add(time.Second))
	okp, err := readSeed(l.operatorSeedFile())
	if err != nil {
		return "", err
	}
	accJWT, err := ac.Encode(okp)
	if err != nil {
		return "", fmt.Errorf("auth: tenant %s jwt: %w", name, err)
	}
	if err := writeFile(l.tenantFile(name, ".jwt"), []byte(accJWT), false); err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(l.ResolverDir(), ac.Subject+".jwt"), []byte(accJWT), false); err != nil {
		return "", err
	}
	if err := writeConfig(l); err != nil {
		return "", err
	}
	return accJWT, nil
}

// svcClaims is the services account: JetStream, the API export and the
// per-tenant stream exports guarded by the account token.
func svcClaims(pub string) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = SVCName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1,
		MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
	ac.Exports.Add(&jwt.Export{
		Name: "api", Subject: jwt.Subject(events.SubjectAPIPrefix + ".>"), Type: jwt.Service,
		ResponseType: jwt.ResponseTypeSingleton, ResponseThreshold: APIResponseThreshold,
	})
	for _, s := range tenantStreams {
		// sbx.<kind>.*.> : the third token must be the importer's account.
		ac.Exports.Add(&jwt.Export{Name: s, Subject: jwt.Subject("sbx." + s + ".*.>"), Type: jwt.Stream,
			AccountTokenPosition: 3})
	}
	return ac
}

// tenantStreams are the kinds of per-tenant subjects: sbx.<kind>.<ACC>.>.
var tenantStreams = []string{"live", "progress", "replay"}

func tenantClaims(pub, name, svc string) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	// No JetStream: JetStreamLimits stay zero.
	ac.Imports.Add(&jwt.Import{Name: "api", Subject: jwt.Subject(events.SubjectAPIPrefix + ".>"), Account: svc,
		Type: jwt.Service, Share: true})
	for _, s := range tenantStreams {
		ac.Imports.Add(&jwt.Import{Name: s, Subject: jwt.Subject("sbx." + s + "." + pub + ".>"), Account: svc, Type: jwt.Stream})
	}
	return ac
}

// opsMutations are the $JS.API calls that would rewrite or erase the
// record: the operation records (SBX_OPS), the audit log's checkpoints (a
// deleted checkpoint hides a cut-off audit tail) and the tenants' records
// (a purge drops every tenant to the default limits). No service deletes,
// purges or deletes a message from any of them (ADR 35).
var opsMutations = append([]string{"$JS.API.STREAM.UPDATE." + events.StreamOps},
	eraseCalls(events.StreamOps, "KV_"+events.BucketAudit, "KV_"+events.BucketTenants)...)

// eraseCalls are the $JS.API calls that delete a stream, purge it or
// delete one of its messages, for each stream named.
func eraseCalls(streams ...string) []string {
	var calls []string
	for _, s := range streams {
		calls = append(calls, "$JS.API.STREAM.DELETE."+s, "$JS.API.STREAM.PURGE."+s, "$JS.API.STREAM.MSG.DELETE."+s)
	}
	return calls
}

// streamConfigs are the $JS.API calls that set a stream's configuration
// (a bucket's or an object store's too). A stream's RePublish is published
// by the server, not by the user who set it, past that user's permissions:
// whoever may configure a stream may make the server publish commands on
// sbx.cmd.>, replies, output or records for it, or mirror one stream into
// another that does. No service gets any of them (ADR 35): admin sets the
// bus up (`sandboxio bus init`, or `sandboxio dev --auth`), the services
// only use what exists.
var streamConfigs = []string{
	"$JS.API.STREAM.CREATE.>",
	"$JS.API.STREAM.UPDATE.>",
	"$JS.API.STREAM.RESTORE.>",
}

// tenantsKV: only admin writes tenant records.
const tenantsKV = "$KV." + events.BucketTenants + ".>"

// auditKV: only the auditor publishes its checkpoints (and admin).
const auditKV = "$KV." + events.BucketAudit + ".>"

// apiKeysKV: only admin writes the front doors' API keys.
const apiKeysKV = "$KV." + bus.BucketAPIKeys + ".>"

type perms struct{ pubAllow, pubDeny, subAllow, subDeny []string }

// rolePermissions are the publish permissions of each services user (all
// may subscribe to anything in their account but what subDeny names).
func rolePermissions(role string) perms {
	p := servicePermissions(role)
	switch role {
	case RoleRouter, RoleAuditor, RoleReaper:
		// A connection to a sandbox's port crosses the bus between a
		// gateway and a worker only: nobody else reads or injects frames.
		p.pubDeny = append(p.pubDeny, events.SubjectTunnelAll)
		p.subDeny = append(p.subDeny, events.SubjectTunnelAll)
	}
	return p
}

func servicePermissions(role string) perms {
	switch role {
	case RoleRouter:
		return perms{pubAllow: []string{">"}, pubDeny: append([]string{events.SubjectOpsAll, events.SubjectOutAll,
			"sbx.progress.>", events.SubjectLiveAll, "_SBX.router.>", tenantsKV, auditKV, apiKeysKV}, append(streamConfigs, opsMutations...)...)}
	case RoleWorker:
		return perms{pubAllow: []string{">"}, pubDeny: append([]string{events.SubjectCmdAll, "sbx.api.>",
			events.SubjectLiveAll, "sbx.replay.>", tenantsKV, auditKV, apiKeysKV}, append(streamConfigs, opsMutations...)...)}
	case RoleAuditor:
		return perms{pubAllow: []string{">"}, pubDeny: append([]string{events.SubjectCmdAll, events.SubjectOpsAll,
			events.SubjectOutAll, "sbx.progress.>", events.SubjectLiveAll, "sbx.replay.>", "_SBX.router.>", "sbx.api.>",
			tenantsKV, apiKeysKV}, append(streamConfigs, opsMutations...)...)}
	case RoleReaper:
		// The reaper asks a sandbox's worker to kill it and records the reap
		// (signed with keys/signing-reaper.nk; see internal/recsign).
		return perms{pubAllow: []string{"$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>", "$KV.>", "$O.>", "$SRV.>",
			"sbx.cmd.*.node.*." + events.Verb(events.OpKill), events.SubjectOpsAll},
			pubDeny: append([]string{tenantsKV, auditKV, apiKeysKV}, append(streamConfigs, opsMutations...)...)}
	case RoleGateway:
		return gatewayPermissions()
	case RoleE2B:
		return e2bPermissions()
	default: // admin, sys
		return perms{}
	}
}

// tenantPermissions: the API and the tenant's own inbox and streams.
func tenantPermissions(acc string) perms {
	p := perms{pubAllow: []string{events.SubjectAPIPrefix + ".>", "_INBOX.>"}, subAllow: []string{"_INBOX.>"}}
	for _, s := range tenantStreams {
		p.subAllow = append(p.subAllow, "sbx."+s+"."+acc+".>")
	}
	return p
}

func newUserCreds(issuer nkeys.KeyPair, name string, p perms, expires time.Time) ([]byte, string, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("auth: user key: %w", err)
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	uc.Pub.Allow.Add(p.pubAllow...)
	uc.Pub.Deny.Add(p.pubDeny...)
	uc.Sub.Allow.Add(p.subAllow...)
	uc.Sub.Deny.Add(p.subDeny...)
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
		if uc.IssuedAt = expires.Add(-time.Minute).Unix(); uc.IssuedAt <= 0 {
			uc.IssuedAt = 1
		}
	}
	ujwt, err := uc.Encode(issuer)
	if err != nil {
		return nil, "", fmt.Errorf("auth: user %s jwt: %w", name, err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		return nil, "", fmt.Errorf("auth: user %s creds: %w", name, err)
	}
	return creds, upub, nil
}

// layoutSettings is layout.json.
type layoutSettings struct {
	ResolverDir string `json:"resolver_dir,omitempty"`
}

// writeConfig (re)writes the server configuration with every account of
// the layout preloaded.
func writeConfig(l *Layout) error {
	var set layoutSettings
	if b, err := os.ReadFile(filepath.Join(l.Dir, "layout.json")); err == nil {
		if err := json.Unmarshal(b, &set); err != nil {
			return fmt.Errorf("auth: layout.json: %w", err)
		}
	}
	opJWT, err := os.ReadFile(l.OperatorJWTFile())
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	preload := map[string]string{}
	files := []string{l.accountFile(SYSName, ".jwt"), l.accountFile(SVCName, ".jwt")}
	tjwts, _ := filepath.Glob(filepath.Join(l.Dir, "accounts", "tenants", "*.jwt"))
	for _, f := range append(files, tjwts...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		ac, err := jwt.DecodeAccountClaims(string(b))
		if err != nil {
			return fmt.Errorf("auth: %s: %w", f, err)
		}
		preload[ac.Subject] = string(b)
	}
	resolver := set.ResolverDir
	if resolver == "" {
		resolver = l.ResolverDir()
	}
	return writeFile(l.ConfigFile(), serverConfig(string(opJWT), l.SYS, resolver, preload), false)
}

// serverConfig is the nats-server configuration: operator mode with a full
// resolver in the layout's resolver directory and SYS and SVC preloaded.
func serverConfig(opJWT, sys, resolverDir string, preload map[string]string) []byte {
	var b strings.Builder
	b.WriteString("# sandboxio NATS account layout, written by `sandboxio auth init`.\n")
	b.WriteString("# Load it with `nats-server -c THIS -js` or `sandboxio nats-server --config THIS`.\n")
	fmt.Fprintf(&b, "operator: %q\n", opJWT)
	fmt.Fprintf(&b, "system_account: %s\n", sys)
	b.WriteString("resolver: {\n  type: full\n")
	fmt.Fprintf(&b, "  dir: %q\n", resolverDir)
	// A short lookup timeout: a user of an account the server does not
	// know is refused within a second, before the server's first PING,
	// so that clients see "Authorization Violation" and not a protocol
	// error.
	b.WriteString("  allow_delete: false\n  interval: \"2m\"\n  timeout: \"1s\"\n}\n")
	b.WriteString("resolver_preload: {\n")
	keys := make([]string, 0, len(preload))
	for k := range preload {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %q\n", k, preload[k])
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

func validName(s string) bool { return events.ValidID(s) && len(s) <= 64 }

func seedOf(kp nkeys.KeyPair) []byte {
	s, _ := kp.Seed()
	return append(s, '\n')
}

func readSeed(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("auth: %s: not a seed: %w", path, err)
	}
	return kp, nil
}

func readCredsUser(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return "", err
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return "", err
	}
	return uc.Subject, nil
}

// writeFile writes atomically (temporary file, rename) with mode 0600 for
// secrets and 0644 otherwise; a missing directory is created 0700 for a
// secret, 0755 otherwise (the server reads the configuration and the
// resolver directory, and may run as another user).
func writeFile(path string, data []byte, secret bool) error {
	dm := os.FileMode(publicDirMode)
	if secret {
		dm = dirMode
	}
	if err := os.MkdirAll(filepath.Dir(path), dm); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	mode := os.FileMode(publicMode)
	if secret {
		mode = secretMode
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("auth: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}
