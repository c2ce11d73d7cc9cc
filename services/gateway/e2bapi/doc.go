// Package e2bapi is an E2B-compatible HTTP API in front of sandboxio: E2B's
// SDKs (e2b, e2b-code-interpreter, Python and JavaScript), unchanged, run
// their sandboxes on sandboxio when E2B_API_URL and E2B_SANDBOX_URL point
// at it (docs/e2b-compat.md).
//
// The control plane (POST /sandboxes and /v2/sandboxes, GET/DELETE
// /sandboxes/{id}, GET /v2/sandboxes, /timeout, /refreshes, /connect)
// authenticates an API key (X-API-Key, e2b_<hex>) against the sbx_apikeys
// bucket, where each key's SHA-256 maps to a tenant's account, and calls
// the router through pkg/client on behalf of that tenant
// (client.WithOnBehalfOf): the API's connection belongs to the services
// account, the only place where a Nats-Request-Info header is not replaced
// by the server, so the router applies that tenant's ownership and quotas.
// Templates map to classes or DSNs through Config.Templates.
//
// The sandbox plane is routed by the E2b-Sandbox-Id and E2b-Sandbox-Port
// headers (plain-HTTP mode, SDK ≥ 2.7) or by <port>-<id>.<Config.Domain>
// hosts: envd's Connect services process.Process and
// filesystem.Filesystem (JSON and binary codecs, connect-go), /files,
// /health, and the code interpreter's /execute and /contexts, each turned
// into sandboxio operations (streamed exec, stdin, signal, files.*,
// run_code, code_context). Every sandbox-plane request carries the
// sandbox's envd access token: base64(tenant) "." HMAC-SHA256(TokenKey,
// sandbox, tenant), issued at create, so the plane knows whom to act for
// without a lookup and a token of one sandbox opens no other.
//
// A foreign sandbox and an unknown one get the same answer everywhere:
// 404 {code, message} on the control plane, 502 "The sandbox was not found"
// on the sandbox plane.
package e2bapi
