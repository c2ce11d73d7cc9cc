// Package auditor renders sandboxio's operation records (stream SBX_OPS)
// three ways: an append-only, hash-chained JSONL audit log, OpenTelemetry
// spans, and Prometheus metrics.
//
// # Consumption and exactly-once
//
// The auditor reads SBX_OPS through a durable pull consumer (default name
// "auditor") with explicit acks and bounded PullMaxMessages. A batch of
// records is appended to the log, the file is fsync'd, and only then are the
// messages acked. A record is identified by its CloudEvent id
// ("<op_id>-<phase>"); the log keeps an index of its most recent ids
// (Config.IndexSize, default DefaultIndexSize, loaded when the log is opened),
// so a record redelivered to the same instance, or published twice, is acked
// without being written again: a record is in a log file once. The index is
// bounded because only recent records come back in normal operation (see
// DefaultIndexSize for what it covers and what it does not). A torn last line left by a crash is cut off at open (it
// was never acked, so it is redelivered).
//
// # Scaling
//
// Each Service instance is the single writer of its own log file. Instances
// that share the durable consumer divide the records between them, so the
// audit trail is the union of their files; every file verifies on its own.
// Because the index is per file, a record redelivered to a different
// instance (only after an instance died between fsync and ack) can appear in
// two files, never twice in one. Deployments that need one file holding
// every record exactly once run one instance per durable name (a second
// durable name gives a complete, independent replica). See docs/operations.md.
//
// # Log format
//
// Format FormatVersion (2). One JSON object per line (Entry): seq (from 1,
// contiguous), id, type, source, time, subject, stream_seq, record (the
// OpRecord as published, already redacted by the worker), its signature
// headers as received (signature, sig_batch, not_after; data holds the
// signed bytes when record cannot), prev_hash and hash, where
// hash = hex(SHA-256(prev_hash || canonical JSON of the entry without "hash"))
// and the first prev_hash is 64 zeros. Canonical JSON has sorted keys, no
// insignificant whitespace and numbers as written. Checkpoint lines (type
// TypeCheckpoint), signed by the auditor's key, vouch for the hash of the
// line before them: one at most every Config.CheckpointEvery lines, one at
// most Config.CheckpointInterval after the first line since the last, and
// one when the log is closed. VerifyWith checks the chain, every signature
// again and the checkpoints (docs/operations.md); the Service checks only
// the lines from the last checkpoint signed by its persistent key on
// (sealtimer.go).
//
// # Signatures
//
// Workers sign every record (headers Sbx-Signer and Sbx-Signature over
// events.SignedRecordPayload). The auditor checks each record as it
// arrives and writes its verdict into the line, where the chain covers it:
// "sig" is SigOK, SigMissing (no signature: not published by a worker),
// SigInvalid (does not verify: forged, or altered after signing) or
// SigUntrusted (a valid signature by a key nobody vouches for), and "signer"
// the key it claimed. A key is trusted when it is in Config.TrustedSigners,
// or, when that list is empty, when the record's worker advertised it in its
// lease in sbx_workers (the auditor watches the bucket and remembers, up to
// bounds, the keys each worker advertised, so records of a worker whose
// lease expired still verify). The reaper's records name
// recsign.ReaperWorker as their worker; without a list they are trusted when
// signed by a key a reaper advertised in sbx_reaper (internal/recsign, also
// watched and remembered), and such a key vouches for no other record. The
// lease and advert rules trust whoever may write those buckets; production
// deployments set TrustedSigners (auth init lists the reaper's key too). Records that are not
// ok are written all the same, never dropped: Verify lists every such line
// (VerifyReport.Unverified; a line written before signatures reports
// SigUnsigned), and `sandboxio audit verify` prints them and exits
// non-zero.
package auditor
