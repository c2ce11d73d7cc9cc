// Package events is the sandboxio wire contract, protocol v1: the subjects and
// stream names of the bus, the CloudEvent types, every request, reply, command
// and record payload, the SBX error catalog, and the value types shared by
// every service (IsolationTier, NetworkPolicy, Capability).
//
// It imports only the standard library so that the contract is plain JSON
// that any language can follow, and so that it can become a module of its
// own without a code change. `make check` enforces the fence.
//
// # Subject map
//
//	sbx.api.v1.<op>                                   client API (NATS micro service "sandboxio"), request/reply
//	sbx.cmd.<backend>.pool.create                     SBX_CMD (WorkQueue): creates, shared by a backend's pool
//	sbx.cmd.<backend>.node.<worker>.<verb>            SBX_CMD: commands for a sandbox owned by one worker
//	sbx.ops.<backend>.<sandbox>.<event>               SBX_OPS (Limits): operation records (opened, closed)
//	sbx.out.<tenant>.<sandbox>.<process>.<stream>     SBX_OUT (Limits): stdout, stderr chunks and the exit marker
//	sbx.live.<tenant>.<sandbox>.<process>.<stream>    core-NATS live copy of SBX_OUT (stream RePublish)
//	sbx.progress.<tenant>.<sandbox>                   core NATS: progress of a create (image pulls), best effort
//	sbx.replay.<tenant>.<nonce>                       core NATS: stored output replayed for an attach
//	sbx.tun.<backend>.<worker>.open                   core NATS: a gateway's signed TunnelOpen to the sandbox's worker
//	sbx.tun.<backend>.<worker>.c.<conn>               core NATS: a port connection's frames to the worker
//	sbx.tun.gw.<gateway>.<conn>                       core NATS: the open's answer, then the frames to the gateway
//	KV sbx_registry   <sandbox>                       -> Sandbox
//	KV sbx_workers    <backend>.<worker>              -> WorkerLease (TTL lease, heartbeat)
//	KV sbx_idem       <idempotency hash>              -> sandbox id
//	KV sbx_tenants    <tenant>                        -> TenantRecord (quotas)
//	KV sbx_audit      <audit log id>                  -> the auditor's latest checkpoint line
//	Object store sbx_files                            files larger than one message
//
// Ids that become subject tokens are validated by ValidID: lowercase letters,
// digits, '-' and '_' only, so '.', '*', '>' and whitespace can never reach a
// subject.
//
// # Versioning
//
// ProtocolVersion is an integer. Changes inside a version are additive only:
// new optional fields, new ops, new error codes. Decoders reject unknown
// fields in requests, so a client that sends a field the server does not know
// learns it at once (SBX_E1002) instead of having it silently ignored. A
// breaking change adds a new version (sbx.api.v2.*, io.sandboxio.v2.*) next to
// the old one. See Changelog.
package events
