// Package reaper enforces sandbox lifetimes and cleans up after lost
// workers.
//
// # One active instance
//
// Any number of reapers run; one is active. The active one holds the key
// "active" in the KV bucket sbx_reaper (TTL = Config.LeaderTTL, with limit
// markers so that an expiry reaches watchers): it takes it with Create (which
// succeeds only when the key is absent, deleted or expired) and refreshes it
// every LeaderTTL/3 with a revision-checked Update. An Update that fails
// because the revision moved means another instance took over, and the
// active one stands down at once. Otherwise it stands down at a deadline
// 2/3 of the TTL after it sent its last successful write, whether or not an
// Update has failed (each Update is bounded by that deadline), before a
// standby can take the expired key. Standing down first clears Active and
// cancels the active work, then waits for it. Standbys watch the key and try Create when it is
// deleted (clean shutdown of the active one: immediate take-over) or expires
// (crash: take-over within about one TTL), and otherwise do nothing. Every
// action is safe if two instances briefly overlap: registry changes are
// revision-checked and kills are idempotent.
//
// # What the active instance does
//
//   - Deadline evictor: it watches sbx_registry and keeps one timer per live
//     sandbox at its deadline. When it fires, the sandbox's worker gets a kill
//     command (SBX_CMD, sbx.cmd.<backend>.node.<worker>.kill, with a reply
//     inbox) and the kill is recorded as a "reap" operation on SBX_OPS; if the
//     worker's lease is gone the sandbox is marked lost instead.
//   - Lost workers: it watches sbx_workers; when a lease is deleted or
//     expires and is still absent Config.LostGrace later (a worker restarted
//     with the same id within the grace re-adopts its sandboxes), the
//     worker's live sandboxes are marked lost (revision-checked, end_reason
//     "worker lost", a "lost" record each), its queued commands are purged
//     and its per-worker consumer is deleted. The lease is looked up again
//     right before each of these changes; if it is back, nothing more is done.
//   - Sweep: at activation and every Config.Interval it runs Sweep, which
//     catches whatever the watches missed (a lease that expired while no
//     reaper was active, a kill that failed). Sweep decides from a snapshot
//     but re-reads each sandbox right before killing it, and looks a missing
//     lease up again (once per worker) before marking anything lost.
//
// Sweep is also what `sandboxio reap [--dry-run]` runs, from any process.
//
// # Records
//
// Every record the reaper publishes ("reap", "lost") names
// recsign.ReaperWorker as its worker (the sandbox's worker is in its
// summary, key "worker") and is signed like a worker's (internal/recsign)
// with Config.SigningSeed, or a new key per instance. Every instance keeps
// its public key advertised in sbx_reaper under recsign.SignerKey while it
// runs (refreshed every LeaderTTL/3; the bucket's TTL expires it after the
// instance stops) and refreshes the advert before a record if it is older,
// so that an auditor without a trusted list verifies the record.
package reaper
