package e2bapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Ports of E2B's sandbox plane that the front door serves.
const (
	EnvdPort        = 49983
	InterpreterPort = 49999
)

// DefaultEnvdVersion is the envd version the front door reports: the SDKs
// gate features on it (0.5.2 CloseStdin, 0.5.7 octet-stream uploads), and
// it claims nothing it does not serve (0.6.2 file metadata, 0.6.3 watch
// entries).
const DefaultEnvdVersion = "0.5.7"

// clientID is the deprecated constant E2B still returns (and the SDKs
// still require).
const clientID = "6532622b"

// Template maps an E2B template id to a sandboxio class or DSN.
type Template struct {
	Class string `json:"class,omitempty" yaml:"class"`
	DSN   string `json:"dsn,omitempty" yaml:"dsn"`
	// CPUCount, MemoryMB and DiskSizeMB are what get and list report.
	CPUCount   int `json:"cpu_count,omitempty" yaml:"cpu_count"`
	MemoryMB   int `json:"memory_mb,omitempty" yaml:"memory_mb"`
	DiskSizeMB int `json:"disk_size_mb,omitempty" yaml:"disk_size_mb"`
}

// DefaultTemplates serve E2B's two default templates with sandboxio's
// images: base (the SDK's default) on the standard class (Python 3.11,
// bash), code-interpreter-v1 on the data-science image.
func DefaultTemplates() map[string]Template {
	return map[string]Template{
		"base":                {Class: "standard", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024},
		"code-interpreter-v1": {DSN: "docker://sandboxio/python-data:3.11", CPUCount: 2, MemoryMB: 1024, DiskSizeMB: 1024},
	}
}

// Config configures an API.
type Config struct {
	// Conn is a connection of a services-account user: the front door
	// calls the router on behalf of each key's tenant (client.WithOnBehalfOf).
	Conn *nats.Conn
	// Keys resolves API keys (default: the sbx_apikeys bucket through Conn).
	Keys Keys
	// Templates maps template ids to classes (default DefaultTemplates).
	Templates map[string]Template
	// Domain is returned as the sandboxes' domain ("" = null: the SDK keeps
	// its own), and host routing accepts <port>-<id>.<Domain>.
	Domain string
	// EnvdVersion is reported in create and get (default DefaultEnvdVersion).
	EnvdVersion string
	// TokenKey signs the envd access tokens (HMAC-SHA256 of the sandbox id
	// and its tenant). Front doors that serve the same sandboxes must share
	// it; default a random key (tokens then die with the process).
	TokenKey []byte
	// MaxUploadBytes bounds one /files upload (default 100 MiB).
	MaxUploadBytes int64
	// MaxTransfers bounds the /files transfers served at once, each held
	// in memory (default 8), and MaxTenantTransfers one tenant's share of
	// them (default 2); more wait for their turn while their request
	// lasts.
	MaxTransfers       int
	MaxTenantTransfers int
	// TransferTimeout bounds the client's side of one /files transfer:
	// sending an upload's body, taking a download's (default 5 min).
	TransferTimeout time.Duration
	// RequestTimeout bounds one control-plane or unary call (default 60 s).
	RequestTimeout time.Duration
	Logger         *slog.Logger
}

// API is the E2B-compatible HTTP API: the control plane (/sandboxes…) and
// the sandbox plane (envd and the code interpreter, routed by the
// E2b-Sandbox-Id/E2b-Sandbox-Port headers or by <port>-<id>.<domain>
// hosts), on one handler.
type API struct {
	cfg  Config
	log  *slog.Logger
	keys keyCache

	envd envdHandlers
	// transfers bounds the /files uploads and downloads held in memory at
	// once (each up to MaxUploadBytes, or a file's size), and each
	// tenant's share.
	transfers *transferSlots
	// filesActive counts the /files requests past their token check,
	// holding a slot or waiting for one.
	filesActive atomic.Int64

	mu      sync.Mutex
	clients map[string]*client.Client
	op      *client.Client
}

// New checks cfg and returns the API. Close releases its clients.
func New(cfg Config) (*API, error) {
	if cfg.Conn == nil {
		return nil, errors.New("e2bapi: Config.Conn is required")
	}
	if cfg.Templates == nil {
		cfg.Templates = DefaultTemplates()
	}
	for id, t := range cfg.Templates {
		if (t.Class == "") == (t.DSN == "") {
			return nil, fmt.Errorf("e2bapi: template %q: give a class or a dsn", id)
		}
	}
	if cfg.EnvdVersion == "" {
		cfg.EnvdVersion = DefaultEnvdVersion
	}
	if len(cfg.TokenKey) == 0 {
		cfg.TokenKey = make([]byte, 32)
		if _, err := rand.Read(cfg.TokenKey); err != nil {
			return nil, fmt.Errorf("e2bapi: token key: %w", err)
		}
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 100 << 20
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Keys == nil {
		js, err := jetstreamOf(cfg.Conn)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		k, err := OpenKVKeys(ctx, js)
		if err != nil {
			return nil, err
		}
		cfg.Keys = k
	}
	if cfg.MaxTransfers <= 0 {
		cfg.MaxTransfers = 8
	}
	if cfg.MaxTenantTransfers <= 0 {
		cfg.MaxTenantTransfers = 2
	}
	cfg.MaxTenantTransfers = min(cfg.MaxTenantTransfers, cfg.MaxTransfers)
	if cfg.TransferTimeout <= 0 {
		cfg.TransferTimeout = 5 * time.Minute
	}
	return &API{cfg: cfg, log: cfg.Logger.With("service", "e2bapi"), clients: map[string]*client.Client{},
		transfers: newTransferSlots(cfg.MaxTransfers, cfg.MaxTenantTransfers)}, nil
}

// Close releases the per-tenant clients (the connection stays open).
func (a *API) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.clients {
		c.Close()
	}
	a.clients = map[string]*client.Client{}
}

// clientFor is the client that acts for tenant.
func (a *API) clientFor(tenant string) (*client.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[tenant]; ok {
		return c, nil
	}
	c, err := client.New(a.cfg.Conn, client.WithOnBehalfOf(tenant), client.WithLogger(a.log),
		client.WithRequestTimeout(a.cfg.RequestTimeout), client.WithTeardownGrace(5*time.Second))
	if err != nil {
		return nil, err
	}
	if len(a.clients) >= maxTenantClients {
		for k, old := range a.clients {
			old.Close()
			delete(a.clients, k)
			break
		}
	}
	a.clients[tenant] = c
	return c, nil
}

// operator is a client acting for nobody: inside the services account it
// sees every sandbox (only to find whose a presigned URL's sandbox is).
func (a *API) operator() *client.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.op == nil {
		a.op, _ = client.New(a.cfg.Conn, client.WithLogger(a.log), client.WithRequestTimeout(a.cfg.RequestTimeout))
	}
	return a.op
}

// maxTenantClients bounds the cached per-tenant clients.
const maxTenantClients = 1024

// ServeHTTP routes a request to the sandbox plane when it carries routing
// headers or a sandbox host, and to the control plane otherwise.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if controlPath(r.URL.Path) {
		// Older SDKs send the routing headers on connect too; no envd path
		// looks like these.
		a.serveControl(w, r)
		return
	}
	if id, port, ok, msg := a.sandboxRoute(r); msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	} else if ok {
		a.serveSandbox(w, r, id, port)
		return
	}
	a.serveControl(w, r)
}

// controlPath reports whether p is the control plane's whatever the
// headers say.
func controlPath(p string) bool {
	return p == "/sandboxes" || strings.HasPrefix(p, "/sandboxes/") || strings.HasPrefix(p, "/v2/sandboxes")
}

// sandboxRoute reads the sandbox plane's routing: both E2b-Sandbox-Id and
// E2b-Sandbox-Port (one alone is an error, as E2B's proxy says), or a host
// <port>-<id>.<domain>.
func (a *API) sandboxRoute(r *http.Request) (id string, port int, ok bool, msg string) {
	hid, hport := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
	switch {
	case hid != "" && hport != "":
		p, err := strconv.Atoi(hport)
		if err != nil || p <= 0 || p > 65535 {
			return "", 0, false, "Invalid header: E2b-Sandbox-Port"
		}
		return hid, p, true, ""
	case hid != "":
		return "", 0, false, "Missing header: E2b-Sandbox-Port"
	case hport != "":
		return "", 0, false, "Missing header: E2b-Sandbox-Id"
	}
	if a.cfg.Domain == "" {
		return "", 0, false, ""
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, rest, found := strings.Cut(host, ".")
	if !found || !strings.EqualFold(rest, a.cfg.Domain) {
		return "", 0, false, ""
	}
	ps, sid, found := strings.Cut(label, "-")
	p, err := strconv.Atoi(ps)
	if !found || err != nil || p <= 0 || p > 65535 || sid == "" {
		return "", 0, false, ""
	}
	return sid, p, true, ""
}

// apiError is the control plane's error body: both keys required by the
// SDKs, code equal to the HTTP status.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode reply"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, apiError{Code: status, Message: fmt.Sprintf(format, args...)})
}

// statusOf maps a sandboxio error to the status E2B gives the same case.
// A foreign sandbox and an unknown one are the same 404.
func statusOf(err error) int {
	switch {
	case errors.Is(err, events.ErrForbidden), errors.Is(err, events.ErrSandboxNotFound),
		errors.Is(err, events.ErrSandboxGone), errors.Is(err, events.ErrInvalidID):
		return http.StatusNotFound
	case errors.Is(err, events.ErrQuotaExceeded), errors.Is(err, events.ErrRateLimited),
		errors.Is(err, events.ErrStorageQuota), errors.Is(err, events.ErrObjectQuotaExceeded):
		return http.StatusTooManyRequests
	case errors.Is(err, events.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, events.ErrCreateTimeout),
		errors.Is(err, events.ErrWorkerTimeout):
		return http.StatusGatewayTimeout
	case errors.Is(err, events.ErrBackendUnavailable), errors.Is(err, events.ErrNoWorker),
		errors.Is(err, events.ErrOverloaded), errors.Is(err, events.ErrReplyLost):
		return http.StatusServiceUnavailable
	}
	var e *events.Error
	if errors.As(err, &e) && strings.HasPrefix(string(e.Code), "SBX_E10") {
		return http.StatusBadRequest
	}
	if errors.As(err, &e) && (strings.HasPrefix(string(e.Code), "SBX_E11") || strings.HasPrefix(string(e.Code), "SBX_E17")) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// messageOf is an error's message for a reply: the SBX code and message,
// never a cause's internals.
func messageOf(err error) string {
	var e *events.Error
	if errors.As(err, &e) {
		return string(e.Code) + " " + e.Name + ": " + e.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the request timed out"
	}
	return "internal error"
}

// tenantOf authenticates a control-plane request by its X-API-Key.
func (a *API) tenantOf(w http.ResponseWriter, r *http.Request) (KeyRecord, bool) {
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		writeError(w, http.StatusUnauthorized, "missing API key: send it in the X-API-Key header")
		return KeyRecord{}, false
	}
	if !WellFormedKey(key) {
		writeError(w, http.StatusUnauthorized, "invalid API key, it must start with 'e2b_' followed by hex digits")
		return KeyRecord{}, false
	}
	id := KeyID(key)
	now := time.Now()
	if rec, ok := a.keys.get(id, now); ok {
		return rec, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rec, err := a.cfg.Keys.Lookup(ctx, id)
	switch {
	case errors.Is(err, ErrKeyNotFound):
		writeError(w, http.StatusUnauthorized, "invalid API key")
		return KeyRecord{}, false
	case err != nil:
		a.log.Warn("api key lookup", slog.Any("err", err))
		writeError(w, http.StatusServiceUnavailable, "API keys cannot be checked now")
		return KeyRecord{}, false
	}
	a.keys.put(id, rec, now)
	return rec, true
}

// accessToken is the envd access token of a sandbox: its tenant (so that
// the sandbox plane knows whom to act for without a lookup) and an HMAC
// of the sandbox id and the tenant.
func (a *API) accessToken(sandboxID, tenant string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "." + a.tokenMAC(sandboxID, tenant)
}

func (a *API) tokenMAC(sandboxID, tenant string) string {
	m := hmac.New(sha256.New, a.cfg.TokenKey)
	m.Write([]byte("sbx e2b envd token v1\n" + sandboxID + "\n" + tenant))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkToken returns the tenant an access token was issued to for
// sandboxID, or false.
func (a *API) checkToken(sandboxID, token string) (string, bool) {
	enc, mac, ok := strings.Cut(token, ".")
	if !ok || len(token) > 512 {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	tenant := string(raw)
	if !events.ValidTenant(tenant) || tenant == events.TenantOpen {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(mac), []byte(a.tokenMAC(sandboxID, tenant))) != 1 {
		return "", false
	}
	return tenant, true
}

// LoadTemplates reads a template table: YAML (or JSON) mapping template ids
// to {class | dsn, cpu_count, memory_mb, disk_size_mb}, e.g.
//
//	base: {class: standard}
//	code-interpreter-v1: {dsn: "docker://sandboxio/python-data:3.11"}
func LoadTemplates(path string) (map[string]Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("e2bapi: templates: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var out map[string]Template
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("e2bapi: templates %s: %w", path, err)
	}
	return out, nil
}

// LoadTokenKey reads the key that signs envd tokens from a file (at least
// 32 bytes; surrounding space is trimmed), for front doors that must
// accept each other's tokens or survive a restart.
func LoadTokenKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("e2bapi: token key: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 {
		return nil, fmt.Errorf("e2bapi: token key %s: %d bytes, want at least 32", path, len(b))
	}
	return b, nil
}
