package events

import "time"

// Ports: a sandbox's TCP port published through the gateway
// (services/gateway). The router keeps what is published in the sandbox's
// registry record (Sandbox.Ports); the gateway reads it there; the worker
// that owns the sandbox opens a connection to a published port only, through
// the sandbox's agent (internal/tunnel), so a sandbox with egress denied is
// reachable on the ports it publishes and on nothing else.
const (
	OpPortsExpose   = "ports.expose"
	OpPortsList     = "ports.list"
	OpPortsUnexpose = "ports.unexpose"
	// OpPortsToken rotates a private port's token and/or mints a signed
	// link that a browser trades for a cookie.
	OpPortsToken = "ports.token"
)

// Wire names of a private port's credentials at the gateway: what a client
// sends or recognises.
const (
	// PortTokenHeader is the header a program sends a private port's token in.
	PortTokenHeader = "X-Sbx-Port-Token"
	// PortLinkParam is the query parameter that carries a signed link's value.
	PortLinkParam = "sbx_link"
	// PortTokenPrefix starts every port token, so that one found in a log
	// or a paste is recognisable.
	PortTokenPrefix = "sbxp_"
)

// CapPorts: the backend can carry a connection to a port inside the sandbox.
const CapPorts Capability = "ports"

// PortAccess says who may reach a published port.
type PortAccess string

const (
	// PortPrivate needs the port's token (header, signed link or cookie).
	PortPrivate PortAccess = "private"
	// PortPublic needs nothing: anyone with the URL reaches it.
	PortPublic PortAccess = "public"
)

// Bounds on ports.
const (
	MinPort = 1
	MaxPort = 65535
	// MaxExposedPorts bounds the ports one sandbox publishes.
	MaxExposedPorts = 16
	// DefaultPortLinkTTL and MaxPortLinkTTL bound a signed link's life.
	DefaultPortLinkTTL = 15 * time.Minute
	MaxPortLinkTTL     = 24 * time.Hour
)

// PortExposure is one published port, as the registry record keeps it.
// The token itself is never stored: TokenHash is the hex SHA-256 of the
// token (internal/portauth), the key that the gateway checks tokens, links
// and cookies with. Rotating the token changes TokenHash and so voids every
// link and cookie made with the old one.
type PortExposure struct {
	Port      int        `json:"port"`
	Access    PortAccess `json:"access"`
	TokenHash string     `json:"token_hash,omitempty"`
	ExposedAt time.Time  `json:"exposed_at"`
}

// PortsExposeRequest is sbx.api.v1.ports.expose. Exposing a port that is
// already published changes its access (and mints a new token when it
// becomes private); it is otherwise idempotent.
type PortsExposeRequest struct {
	SandboxID string     `json:"sandbox_id"`
	Port      int        `json:"port"`
	Access    PortAccess `json:"access,omitempty"` // default private
	// TokenHash is set by the router only (the hash of the token it
	// minted, for the owning worker to keep in the record); a client's is
	// refused.
	TokenHash string `json:"token_hash,omitempty"`
}

// PortInfo describes a published port to its tenant.
type PortInfo struct {
	SandboxID string     `json:"sandbox_id"`
	Port      int        `json:"port"`
	Access    PortAccess `json:"access"`
	// URL is the host-routed address (<port>-<sandbox>.<domain>), PathURL
	// the path-routed one (/sandboxes/<sandbox>/ports/<port>/); both empty
	// when no gateway address is configured.
	URL     string `json:"url,omitempty"`
	PathURL string `json:"path_url,omitempty"`
	// Token is the private port's token, only in the reply that minted it
	// (expose, ports.token with rotate); it is never shown again.
	Token string `json:"token,omitempty"`
	// Link is a signed URL a browser opens once to get a cookie for this
	// sandbox and port; it expires at LinkExpires.
	Link        string     `json:"link,omitempty"`
	LinkExpires *time.Time `json:"link_expires,omitempty"`
	ExposedAt   time.Time  `json:"exposed_at"`
}

// PortsListRequest is sbx.api.v1.ports.list.
type PortsListRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// PortsListReply lists a sandbox's published ports (without tokens).
type PortsListReply struct {
	Ports []PortInfo `json:"ports"`
}

// PortsUnexposeRequest is sbx.api.v1.ports.unexpose; unexposing a port that
// is not published succeeds.
type PortsUnexposeRequest struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
}

// PortsTokenRequest is sbx.api.v1.ports.token: Rotate mints a new token
// (voiding the old one and its links and cookies); LinkTTLS asks for a
// signed link living that many seconds (0: DefaultPortLinkTTL).
type PortsTokenRequest struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	Rotate    bool   `json:"rotate,omitempty"`
	LinkTTLS  int    `json:"link_ttl_s,omitempty"`
	// TokenHash is set by the router only, on a rotation (see
	// PortsExposeRequest.TokenHash).
	TokenHash string `json:"token_hash,omitempty"`
}

// PortSpec is a port to publish at create (CreateRequest.Ports): published
// once the sandbox runs, its PortInfo in the create reply.
type PortSpec struct {
	Port   int        `json:"port"`
	Access PortAccess `json:"access,omitempty"` // default private
}

// PortsCommandReply is the owning worker's answer to a ports.expose,
// ports.unexpose or ports.token command. It travels between the worker and
// the router only: the router answers the tenant with PortInfo.
type PortsCommandReply struct {
	SandboxID string     `json:"sandbox_id"`
	Port      int        `json:"port"`
	Access    PortAccess `json:"access,omitempty"`
	ExposedAt time.Time  `json:"exposed_at,omitzero"`
	// TokenSet says the record now holds the token hash the command
	// carried: the router's token is the port's (and is shown once).
	TokenSet bool `json:"token_set,omitempty"`
	// Exposed is false when the port is not published (after unexpose).
	Exposed bool `json:"exposed"`
	// Ports is how many ports the sandbox publishes now.
	Ports int `json:"ports"`
}

// Effective is the access a request asks for: private when none is given.
func (a PortAccess) Effective() PortAccess {
	if a == "" {
		return PortPrivate
	}
	return a
}

func checkPort(field string, port int) *Error {
	if port < MinPort || port > MaxPort {
		return invalid(field, "%d is out of range %d..%d", port, MinPort, MaxPort)
	}
	return nil
}

func checkAccess(field string, a PortAccess) *Error {
	switch a {
	case "", PortPrivate, PortPublic:
		return nil
	}
	return invalid(field, "%q is not private or public", truncateForMsg(string(a)))
}

// checkTokenHash: empty, or the hex SHA-256 the router sets (never a
// client's: the router overwrites it).
func checkTokenHash(h string) *Error {
	if h == "" {
		return nil
	}
	if len(h) != 64 {
		return invalid("token_hash", "not a hex SHA-256")
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return invalid("token_hash", "not a hex SHA-256")
		}
	}
	return nil
}

// Validate checks a ports.expose request.
func (r *PortsExposeRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPort("port", r.Port); e != nil {
		return e
	}
	if e := checkAccess("access", r.Access); e != nil {
		return e
	}
	return checkTokenHash(r.TokenHash)
}

// Validate checks a ports.list request.
func (r *PortsListRequest) Validate() *Error {
	return checkID("sandbox_id", r.SandboxID, true)
}

// Validate checks a ports.unexpose request.
func (r *PortsUnexposeRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	return checkPort("port", r.Port)
}

// Validate checks a ports.token request.
func (r *PortsTokenRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPort("port", r.Port); e != nil {
		return e
	}
	if r.LinkTTLS < 0 || r.LinkTTLS > int(MaxPortLinkTTL/time.Second) {
		return invalid("link_ttl_s", "%d is out of range 0..%d", r.LinkTTLS, int(MaxPortLinkTTL/time.Second))
	}
	return checkTokenHash(r.TokenHash)
}

// checkPortSpecs checks a create's ports: each valid, none twice, at most
// MaxExposedPorts.
func checkPortSpecs(ps []PortSpec) *Error {
	if len(ps) > MaxExposedPorts {
		return Errorf(CodeTooManyPorts, "%d ports asked; a sandbox publishes at most %d", len(ps), MaxExposedPorts).
			With("field", "ports").With("max", MaxExposedPorts)
	}
	seen := make(map[int]bool, len(ps))
	for _, p := range ps {
		if e := checkPort("ports.port", p.Port); e != nil {
			return e
		}
		if e := checkAccess("ports.access", p.Access); e != nil {
			return e
		}
		if seen[p.Port] {
			return invalid("ports", "port %d is listed twice", p.Port)
		}
		seen[p.Port] = true
	}
	return nil
}

// Public is the record's port without its token hash: what a tenant may
// see of it (get, list).
func (p PortExposure) Public() PortExposure {
	p.TokenHash = ""
	return p
}

// WithoutTokenHashes is the record as a tenant may see it: the token hash
// of each published port cleared (it keys every link and cookie of the
// port, so it is as secret as the token).
func (s Sandbox) WithoutTokenHashes() Sandbox {
	if len(s.Ports) == 0 {
		return s
	}
	ports := make([]PortExposure, len(s.Ports))
	for i, p := range s.Ports {
		ports[i] = p.Public()
	}
	s.Ports = ports
	return s
}

// PortsUnexposeReply answers ports.unexpose.
type PortsUnexposeReply struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	// WasExposed is false when the port was not published (nothing changed).
	WasExposed bool `json:"was_exposed"`
}
