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
// active one stands down at once; one that cannot reach the server steps
// down after 2/3 of the TTL without a successful refresh, before a standby
// can take the expired key. Standbys watch the key and try Create when it is
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
//   - Lost workers: it watches sbx_workers; when a lease is deleted or expires
//     (and is still absent when checked), the worker's live sandboxes are
//     marked lost (revision-checked, end_reason "worker lost", a "lost"
//     record each), its queued commands are purged and its per-worker
//     consumer is deleted.
//   - Sweep: at activation and every Config.Interval it runs Sweep, which
//     catches whatever the watches missed (a lease that expired while no
//     reaper was active, a kill that failed).
//
// Sweep is also what `sandboxio reap [--dry-run]` runs, from any process.
package reaper
