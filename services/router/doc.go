// Package router is the client-facing API of sandboxio: a NATS micro service
// named "sandboxio" on sbx.api.v1.<op>. It validates each request, resolves
// the class (routing file) or dsn, checks isolation and capabilities against
// the live workers' leases, and publishes the command as a CloudEvent to
// SBX_CMD: creates to the backend's pool, everything else to the worker that
// owns the sandbox (from the sbx_registry bucket). Workers answer on a
// per-router reply subject _SBX.router.<router>.<nuid> (a fresh nuid per
// command, so a reply cannot be forged by guessing); the router relays the
// answer, or a coded error when the worker does not answer in time or its
// lease expires. Every command is signed with Config.SigningSeed
// (internal/recsign: over its subject, ce-id and data); workers with a
// trusted commanders list run nothing else. Without a seed commands go
// unsigned: a key made for one instance is one no worker could trust.
//
// Handlers never wait on the bus: a request is handed to JetStream
// asynchronously and answered when the worker's reply arrives, so one slow
// sandbox never holds up the others (the micro pitfall of
// reference/nats-patterns.md §3).
//
// # The trust boundary (docs/security.md)
//
// Identity comes from the server, never from the body: every handler reads
// the Nats-Request-Info header that nats-server stamps on a request crossing
// the services account's service import (case-insensitively; a malformed
// header, two of them, or an account named like the open token is
// SBX_E1401). The caller's tenant is that account; without the header (a
// caller inside the services account, i.e. an operator, or an open
// deployment) it is events.TenantOpen. A create's Tenant is the caller's
// tenant and, for a tenant, its Owner too (a client-supplied owner, and
// list's owner filter, are ignored then); idempotency keys are per tenant.
//
// Ownership: get, exec, run_code, files.*, signal, stdin, set_timeout, kill
// and attach on a sandbox of another tenant, or on one that does not exist,
// answer a tenant SBX_E1402 Forbidden with one message either way, so that
// existence is never revealed (a client-chosen sandbox_id taken by another
// tenant is Forbidden as well). The check reads the registry record from
// the cache and, when the cache lacks it, from the bucket. list shows a
// tenant only its own sandboxes. TenantOpen callers address every sandbox.
//
// Quotas (tenants only; limits from the sbx_tenants bucket, watched, falling
// back to Config.DefaultLimits and events.DefaultTenantLimits; negative =
// unlimited): live sandboxes, the sum of the requested lifetimes of live
// sandboxes (set_timeout included), and concurrent execs + run_codes. Over
// quota is SBX_E1403 QuotaExceeded (retryable) with the quota, limit and
// usage in the details, and nothing is sent. Sandboxes are counted from the
// registry cache plus this router's creates in flight, checked and reserved
// under one lock, so concurrent creates at the limit cannot all pass through
// one router (several routers may each let one through within the
// registry's propagation delay). Execs are counted by the router that
// forwarded them — a non-streamed exec until its reply, a streamed one until
// its exit marker (sbx.live.*.*.*.exit), its timeout or its sandbox's end —
// so with several routers the exec quota applies per router. The quota op
// answers who the caller is, its limits and usage.
//
// Limits: resources above Config.MaxResources (events.DefaultMaxResources)
// are SBX_E1007 naming the field.
//
// Secrets: clear secrets from a plain client are sealed (nkeys xkeys, a
// one-time sender key) to the backend's seal key from the live leases
// before the command leaves the router, and removed; with no live worker of
// the backend advertising a seal key the create is refused (SBX_E1103)
// rather than sent in clear. Client-sealed secrets must be sealed to a live
// worker's key (else SBX_E1007). backends shows each backend's SealKey. The
// router never logs a request body.
//
// attach replays, after the ownership check, what SBX_OUT holds for one
// process to sbx.replay.<caller tenant>.<nonce>: the reply first (Stored =
// the messages stored when the replay starts), then each message with its
// headers and Sbx-Subject, then an empty one with Sbx-Replay-End: <count>.
// At most 64 replays run per router (more: SBX_E1604), each bounded in time
// and paced by flushes.
//
// files.get and files.put move one part (≤ events.MaxInlineFileBytes) of a
// large file in the sbx_files object store, only under the caller's own
// events.FileObjectPrefix (TenantOpen callers: any); a tenant's files.write
// ref must name an object under its own prefix too. What a sandbox and a
// tenant store there (a watch of the bucket's object infos, plus this
// router's puts and reads in flight; a files.read carries the room left,
// readgrant.go) is bounded by max_sandbox_storage_bytes (every
// caller) and max_storage_bytes (tenants): over it is SBX_E1406, not
// retryable, and nothing is stored. Until the watch has loaded the
// bucket's current objects a files.put waits (5 s at most, then
// SBX_E1601, retryable). A sandbox's objects are deleted once its record
// says it ended, or 10 min after its newest one when the registry does not
// know it, by a sweep that runs only once the registry cache and the watch
// have loaded (storage.go).
//
// Published ports (ports.go, ADR 49): ports.expose, ports.unexpose and a
// token rotation are commands to the sandbox's worker, which keeps them in
// the registry record (Sandbox.Ports) and records them; the router checks
// ownership (as above), the sandbox's state and ports capability, the
// reserved ports (Config.ReservedPorts) and the bound, and mints a private
// port's token, sending only its hash. ports.list and a signed link read
// the record. get and list never show a token hash. The port's URLs come
// from Config.GatewayURL and GatewayDomain.
//
// Requests are bounded before anything else: headers (events.CheckHeaders:
// 8 KiB, a W3C traceparent) and every duration and size (Validate). Once a
// command is sent, an answer the router gives without its worker's result
// is retryable only for ops safe to repeat (outcome.go).
package router
