// Package gateway is the HTTP edge of published ports: it routes
//
//	http(s)://<port>-<sandbox_id>.<domain>/…           (host routing)
//	http(s)://<gateway>/sandboxes/<sandbox_id>/ports/<port>/…  (path routing, prefix stripped)
//
// to a TCP port inside the sandbox, through a PortDialer (internal/tunnel:
// over NATS to the worker that owns the sandbox, and through its agent to
// 127.0.0.1:<port> inside it), so a sandbox with egress denied serves the
// ports it publishes and nothing else.
//
// The gateway keeps no state of its own: it reads the sandbox registry
// (events.BucketRegistry) into a watched cache, finds the sandbox's record
// and its published ports (events.PortExposure) there, and checks a private
// port's credentials with internal/portauth: the token in
// portauth.TokenHeader, a signed link (?sbx_link=) that it trades for a
// cookie and a redirect, or that cookie, both keyed by the port link key
// (Config.PortLinkKey) that only the routers and the gateways hold. Links
// and cookies are host routing's only: every path route shares the
// gateway's one origin, so there the token header alone is taken, a link
// is refused and no cookie is set. Any number of gateways serve the same
// sandboxes.
//
// What it answers: an unknown sandbox, one that is not running, and a port
// it does not publish all get the same 404 (SBX_E1731), so that a URL tells
// nothing about what exists; a private port without a valid credential gets
// one fixed 401 (SBX_E1401); a paused sandbox 409; a port nothing listens on
// 502 (SBX_E1732); a body past the bound 413; too many concurrent requests
// on a port or a tenant 429 (SBX_E1404). The credential header, the link
// parameter and the gateway's cookies never reach the sandbox; hop-by-hop
// headers and every client X-Forwarded-*/Forwarded header are dropped and
// X-Forwarded-For/Proto/Host set by the gateway.
//
// Proxying is net/http's ReverseProxy over one pooled http.Transport per
// sandbox and port, whose DialContext is the PortDialer: HTTP/1.1 with
// keep-alive, streamed bodies both ways, responses of unknown length (and
// server-sent events) flushed as they come, and Upgrade (WebSocket) carried
// as a byte pipe after the 101. Every connection to a sandbox is tracked:
// its bytes are counted, it is closed when idle past the bound, and all of a
// port's connections are closed when the port is unpublished, its token
// rotated or its sandbox gone.
//
// Files: gateway.go (Config, New, Run, the handler), route.go (host and
// path routing), registry.go (the watched registry cache), auth.go
// (credentials), proxy.go (transports, tracked connections, limits),
// metrics.go (Prometheus), reply.go (the fixed error answers).
package gateway
