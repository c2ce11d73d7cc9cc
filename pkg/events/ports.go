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
}
