// Package worker is what every sandbox backend worker shares: the Backend
// interface a backend implements, and the runtime (Worker) that connects a
// backend to the bus. The runtime pulls creates from the backend's pool
// consumer on SBX_CMD, claims each sandbox in the sbx_registry KV bucket,
// consumes its own per-worker consumer for the commands of the sandboxes it
// owns, advertises tier and capabilities in a lease in sbx_workers, streams
// process output to SBX_OUT with per-stream sequences, caps and
// backpressure, enforces exec timeouts and sandbox deadlines, and publishes an
// operation record for every operation to SBX_OPS.
//
// A create whose id is claimed already is a retry when its tenant and
// CreateCommand.SpecHash are the claim's (createretry.go, ADR 37): it
// answers the running sandbox, waits for one being created, or takes over,
// revision-checked, the claim of one that never started.
//
// # Trust
//
// The runtime trusts nothing it receives (see trust.go and
// docs/security.md). Every create is re-checked before it is claimed: a
// valid sandbox id, this backend, a valid tenant (empty: events.TenantOpen,
// from a router that predates tenants), timeout_s and the deadline within
// Config.MaxLifetime, resources within Config.MaxResources; a create out of
// bounds is refused with its SBX code, recorded, and nothing is created.
// Node commands are checked with their events Validate methods; an exec's
// timeout needs no check against the sandbox's deadline, since the kill at
// the deadline ends every process.
//
// Secrets arrive sealed (CreateRequest.SealedSecrets, nkeys xkeys) to the
// backend's public xkey, advertised in the lease (WorkerLease.SealKey;
// Config.SealSeed, shared by every worker of a backend). The worker opens
// them; the plaintext goes only to the backend and to redaction. The router
// never forwards secrets in clear; a command with clear Request.Secrets and
// no sealed box (a router from before sealing) is still accepted, and one
// with both is refused. Process output is the caller's own data and is not
// rewritten: a process that prints a secret prints it.
//
// Every record the worker publishes to SBX_OPS is signed with its nkey
// (Config.SigningSeed; the public key is WorkerLease.SigningKey): headers
// events.HeaderSigner and events.HeaderSignature over
// events.SignedRecordPayload(subject, ce-id, data). Records nothing waits
// for (audit policy other than fail) are gathered for up to
// recordBatchWindow and signed together: one signature over the Merkle root
// of the window's records, each record carrying its proof
// (events.HeaderSignatureBatch; internal/recsign, ADR 17). Each record still
// verifies on its own. The auditor verifies them. Commands are signed the same way by the router and the reaper: with
// Config.TrustedCommandSigners set, a command (pool create or node command)
// signed by no key of the list is refused with SBX_E1401 (a create is
// recorded as refused) and never runs.
//
// Files larger than events.MaxInlineFileBytes move through the object store
// sbx_files as parts (events.FilePartName) under
// events.FileObjectPrefix(tenant, sandbox); a tenant's sandbox takes in only
// objects under its own prefix (SBX_E1402 otherwise).
//
// # Locks
//
// Lock order: w.mu (the sandbox map) → sb.regMu (one sandbox's registry
// writes) → sb.mu (one sandbox's state) → p.mu (one process's stdin). A
// goroutine holding a later lock never takes an earlier one. No network
// I/O (registry, publish, backend) happens under w.mu, sb.mu or p.mu;
// sb.regMu alone is held across a registry write, so that the writes of
// one sandbox (running, set_timeout, usage, gone) keep their order. The
// output ledger's mutex (w.out.mu, limits.go) and a sandbox's usage.mu are
// leaves: taken under w.mu or a stream writer's lock, they take no other.
// Stdin and signals run on a lane per sandbox (lanes.go); unacknowledged
// records wait in one bounded queue (recordqueue.go).
//
// # Lifecycle
//
// Run's shutdown is bounded by Config.ShutdownGrace (shutdown.go). The
// consumers are recreated when deleted under a live worker (consumers.go).
// Backends may report deaths (DeathWatcher) and janitor removals
// (Janitor) on their own (backendevents.go). A same-id restart ends the
// streams of processes it lost (lostprocs.go).
//
// A third party writes a backend by implementing Backend (and any of the
// optional interfaces) and passing it to New; workertest checks it.
package worker
