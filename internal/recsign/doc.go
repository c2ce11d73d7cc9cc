// Package recsign signs and verifies operation records (SBX_OPS) for every
// publisher of records: pkg/worker, services/reaper, and services/auditor,
// which verifies them. A record message carries the headers
// events.HeaderSigner (the signer's public user nkey, U…) and
// events.HeaderSignature (base64 std of the ed25519 signature over
// events.SignedRecordPayload(subject, ce-id, data)), or, when it was signed
// in a batch with others (Key.Sign under concurrency, ADR 17), the
// signature over the batch's Merkle root and the message's proof in
// events.HeaderSignatureBatch (batch.go). Either way each message verifies
// on its own.
//
// It also holds the small contract by which the reaper vouches for its own
// key without an operator list: the reaper's records name ReaperWorker as
// their worker (the sandbox's worker is in the record's summary, key
// "worker"), and every reaper instance advertises its public signing key as
// an Advert under SignerKey(pub) in the bucket ReaperBucket (sbx_reaper,
// whose TTL the reaper sets; each instance refreshes its entry while it
// runs and before it publishes a record). The auditor, when it has no
// trusted list, accepts a record naming ReaperWorker only when signed by
// such a key, and such a key for no other record.
//
// Seeds never leave a Key: not in a log, an error or a record.
package recsign
