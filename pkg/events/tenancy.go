package events

import (
	"encoding/json"
	"time"
)

// Tenancy: who a request comes from, as the NATS server says, and what a
// tenant may use. See docs/security.md.

// TenantOpen is the tenant token of everything the server did not
// authenticate as a tenant: requests without a Nats-Request-Info header
// (an open deployment, or a caller inside the services account). It is a
// subject token, so output of such sandboxes goes to sbx.out._.<sandbox>….
const TenantOpen = "_"

// MaxTenantLength bounds a tenant id (an account public key is 56).
const MaxTenantLength = 64

// ValidTenant reports whether s may be a tenant token in a subject: 1 to
// MaxTenantLength characters from [A-Za-z0-9_-]. NATS account public keys
// (upper-case base32) and the names of config-file accounts pass.
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > MaxTenantLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// HeaderRequestInfo is stamped by nats-server on every request that crossed
// a service import, with the caller's account (and user, when the import
// shares it). A client cannot forge it: the server overwrites it.
const HeaderRequestInfo = "Nats-Request-Info"

// RequestInfo is the part of the server's Nats-Request-Info JSON the
// router uses.
type RequestInfo struct {
	Account string `json:"acc,omitempty"`
	Service string `json:"svc,omitempty"`
	User    string `json:"user,omitempty"`
	Name    string `json:"name,omitempty"`
	NameTag string `json:"name_tag,omitempty"`
}

// ParseRequestInfo decodes a Nats-Request-Info header value. An empty value
// is not an error: it returns ok false (the request came from inside the
// services account, or the deployment is open).
func ParseRequestInfo(v string) (RequestInfo, bool, error) {
	if v == "" {
		return RequestInfo{}, false, nil
	}
	var ri RequestInfo
	if err := json.Unmarshal([]byte(v), &ri); err != nil {
		return RequestInfo{}, false, err
	}
	if !ValidTenant(ri.Account) {
		return RequestInfo{}, false, Errorf(CodeUnauthorized, "request info names no valid account")
	}
	return ri, true, nil
}

// BucketTenants holds one TenantRecord per tenant id (KV sbx_tenants),
// written by `sandboxio tenant add`, read by the router.
const BucketTenants = "sbx_tenants"

// TenantLimits are a tenant's quotas; zero means the router's default, and
// a negative value means unlimited.
type TenantLimits struct {
	// MaxSandboxes bounds the tenant's live (creating or running) sandboxes.
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
	// MaxExecs bounds the tenant's concurrent execs and run_codes.
	MaxExecs int `json:"max_execs,omitempty"`
	// MaxLifetimeS bounds the sum of the requested lifetimes (timeout_s) of
	// the tenant's live sandboxes, in seconds.
	MaxLifetimeS int64 `json:"max_lifetime_s,omitempty"`
	// MaxStorageBytes bounds what the tenant's sandboxes store in the bus
	// together (sbx_files: files.put parts and files.read objects).
	MaxStorageBytes int64 `json:"max_storage_bytes,omitempty"`
	// MaxSandboxStorageBytes bounds what one sandbox stores there.
	MaxSandboxStorageBytes int64 `json:"max_sandbox_storage_bytes,omitempty"`
	// MaxOutputBytes bounds the output the tenant's sandboxes keep in
	// SBX_OUT together, ended sandboxes' included while the stream holds
	// it: each worker enforces it at publish time (SBX_E1706 with
	// details.quota "max_output_bytes"), so that one tenant's floods cannot
	// evict another tenant's output (ADR 44).
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// MaxRequestsPerS bounds the tenant's API requests a second, per
	// router, with a burst of five seconds' worth (SBX_E1404 with
	// details.quota "max_requests_per_s"): it bounds the operation records
	// the tenant makes SBX_OPS store (docs/operations.md).
	MaxRequestsPerS int64 `json:"max_requests_per_s,omitempty"`
	// MaxSnapshotBytes bounds the compressed bytes of the tenant's
	// snapshots, paused sandboxes' included (SBX_E1407); MaxSnapshots
	// their number (SBX_E1408).
	MaxSnapshotBytes int64 `json:"max_snapshot_bytes,omitempty"`
	MaxSnapshots     int64 `json:"max_snapshots,omitempty"`
	// SnapshotRetentionS is how long a snapshot or a paused sandbox is
	// kept (at most MaxSnapshotRetentionS).
	SnapshotRetentionS int64 `json:"snapshot_retention_s,omitempty"`
}

// TenantRecord is a tenant as the operator created it.
type TenantRecord struct {
	ID        string       `json:"id"`   // the NATS account (public key or config name)
	Name      string       `json:"name"` // a human name, e.g. "team-a"
	Limits    TenantLimits `json:"limits"`
	CreatedAt time.Time    `json:"created_at"`
}

// DefaultTenantLimits are a tenant's quotas when neither its record nor
// the router's configuration sets them.
var DefaultTenantLimits = TenantLimits{MaxSandboxes: 50, MaxExecs: 200, MaxLifetimeS: 50 * 3600,
	MaxStorageBytes: 1 << 30, MaxSandboxStorageBytes: 256 << 20, MaxOutputBytes: 1 << 30,
	MaxRequestsPerS: 200, MaxSnapshotBytes: 2 << 30, MaxSnapshots: 50, SnapshotRetentionS: 7 * 24 * 3600}

// DefaultMaxResources bounds what one create may ask for unless the
// operator configures other limits; the router refuses more and every
// worker re-checks.
var DefaultMaxResources = Resources{CPUs: 8, MemoryMB: 8 << 10, PIDs: 4096, DiskMB: 64 << 10}

// OrDefaults returns r with every zero field taken from d.
func (r Resources) OrDefaults(d Resources) Resources {
	if r.CPUs == 0 {
		r.CPUs = d.CPUs
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = d.MemoryMB
	}
	if r.PIDs == 0 {
		r.PIDs = d.PIDs
	}
	if r.DiskMB == 0 {
		r.DiskMB = d.DiskMB
	}
	return r
}

// Within checks r against limit: no field negative or above limit's. The
// error is SBX_E1007 naming the field ("resources.cpus") and the limit; the
// router and every worker use it, so both refuse the same requests alike.
func (r Resources) Within(limit Resources) *Error {
	over := func(field string, got, max any) *Error {
		return Errorf(CodeInvalidValue, "resources.%s: %v exceeds the limit %v", field, got, max).
			With("field", "resources."+field).With("limit", max)
	}
	switch {
	case r.CPUs < 0 || r.MemoryMB < 0 || r.PIDs < 0 || r.DiskMB < 0:
		return Errorf(CodeInvalidValue, "resources must not be negative").With("field", "resources")
	case r.CPUs > limit.CPUs:
		return over("cpus", r.CPUs, limit.CPUs)
	case r.MemoryMB > limit.MemoryMB:
		return over("memory_mb", r.MemoryMB, limit.MemoryMB)
	case r.PIDs > limit.PIDs:
		return over("pids", r.PIDs, limit.PIDs)
	case r.DiskMB > limit.DiskMB:
		return over("disk_mb", r.DiskMB, limit.DiskMB)
	}
	return nil
}

// TenantUsage is what a tenant uses now.
type TenantUsage struct {
	Sandboxes int   `json:"sandboxes"`
	Execs     int   `json:"execs"`
	LifetimeS int64 `json:"lifetime_s"`
	// StorageBytes is what the tenant's sandboxes store in sbx_files.
	StorageBytes int64 `json:"storage_bytes"`
	// OutputBytes is the output of the tenant's sandboxes in SBX_OUT, as
	// their registry records last counted it (usage.output_bytes).
	OutputBytes int64 `json:"output_bytes"`
}

// QuotaRequest is sbx.api.v1.quota: the caller's own tenant (empty).
type QuotaRequest struct{}

// QuotaReply answers quota: who the server says the caller is, the
// effective limits (defaults applied; -1 = unlimited) and the usage.
type QuotaReply struct {
	Tenant string       `json:"tenant"`
	Name   string       `json:"name,omitempty"`
	Limits TenantLimits `json:"limits"`
	Usage  TenantUsage  `json:"usage"`
}

// SealedBox is a value sealed with NATS xkeys (curve25519 box) to a
// worker's public xkey: Data is the base64 of the xkeys Seal output, whose
// plaintext is the JSON object of the secrets. Only a worker holding the
// recipient's seed can open it; the router never can.
type SealedBox struct {
	Recipient string `json:"recipient"` // the worker's public xkey (X…)
	Sender    string `json:"sender"`    // the sealer's public xkey (X…), usually one-time
	Data      string `json:"data"`      // base64
}

// AttachRequest is sbx.api.v1.attach: replay the stored output of one
// process to Nonce's replay subject (sbx.replay.<tenant>.<nonce>), which
// the caller subscribes to before it asks. Live output keeps coming on the
// live subjects; the caller merges both by Sbx-Seq.
type AttachRequest struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	// Nonce names the replay subject; ValidID, chosen at random by the caller.
	Nonce string `json:"nonce"`
}

// AttachReply answers attach before the replay starts.
type AttachReply struct {
	SandboxID string         `json:"sandbox_id"`
	ProcessID string         `json:"process_id"`
	Replay    string         `json:"replay"` // the subject the replay comes on
	Subjects  StreamSubjects `json:"subjects"`
	// Stored is how many messages the replay will deliver, then an end
	// message with HeaderReplayEnd.
	Stored int `json:"stored"`
}

// Replay headers: every replayed message carries the subject it was stored
// under; the last one carries HeaderReplayEnd with the count delivered.
const (
	HeaderReplaySubject = "Sbx-Subject"
	HeaderReplayEnd     = "Sbx-Replay-End"
)

// FilesGetRequest is sbx.api.v1.files.get: one part of a large file that
// a files.read returned as a Ref, served by the router from the object
// store to callers who have no JetStream API (tenants).
type FilesGetRequest struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"` // the Ref's name; must belong to the caller
	Part      int    `json:"part"` // 0 … Ref.Parts-1
}

// FilesGetReply is one part, base64.
type FilesGetReply struct {
	Name  string `json:"name"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	Data  string `json:"data"`
}

// FilesPutRequest is sbx.api.v1.files.put: one part of a large file to be
// written with files.write {ref:{name, parts}}; Name must be
// FilesUploadPrefix(tenant, sandbox) + a ValidID of the caller's choice.
type FilesPutRequest struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name"`
	Part      int    `json:"part"`
	Data      string `json:"data"` // base64, at most MaxInlineFileBytes decoded
}

// FilesPutReply answers files.put.
type FilesPutReply struct {
	Name string `json:"name"`
	Part int    `json:"part"`
	Size int64  `json:"size"`
}

// FileObjectPrefix is the prefix of every object of one sandbox in
// sbx_files: <tenant>/<sandbox>/. The router serves and accepts only
// objects under the caller's own prefix; a worker writes into a sandbox
// only objects under that sandbox's prefix.
func FileObjectPrefix(tenant, sandbox string) string { return tenant + "/" + sandbox + "/" }

// FilePartName is the object name of part i of a multi-part file.
func FilePartName(name string, part int) string { return name + "/" + itoa(part) }

// SignedRecordPayload is what a worker signs for a record (and the auditor
// verifies): the subject, the CloudEvent id and the data, joined by
// newlines. Headers HeaderSigner and HeaderSignature carry the signer's
// public nkey and the base64 (std, padded) ed25519 signature.
func SignedRecordPayload(subject, ceID string, data []byte) []byte {
	b := make([]byte, 0, len(subject)+len(ceID)+2+len(data))
	b = append(b, subject...)
	b = append(b, '\n')
	b = append(b, ceID...)
	b = append(b, '\n')
	return append(b, data...)
}

// notAfterSignedPrefix starts what a signature covers for a message that
// carries HeaderNotAfter (a command): the deadline is signed with the
// subject, the ce-id and the data, so that whoever puts a signed command
// back on its subject cannot strip or move it. It holds spaces, which no
// subject does, so the payload of a message with a deadline is never that
// of a message without.
const notAfterSignedPrefix = "sbx not after v1 "

// SignedPayload is what a message's signature covers (in a batch, what its
// leaf hashes): SignedRecordPayload(subject, ceID, data), preceded, when
// notAfter (the message's HeaderNotAfter) is not empty, by
// "sbx not after v1 " notAfter "\n".
func SignedPayload(subject, ceID, notAfter string, data []byte) []byte {
	if notAfter == "" {
		return SignedRecordPayload(subject, ceID, data)
	}
	b := make([]byte, 0, len(notAfterSignedPrefix)+len(notAfter)+len(subject)+len(ceID)+3+len(data))
	b = append(b, notAfterSignedPrefix...)
	b = append(b, notAfter...)
	b = append(b, '\n')
	return append(b, SignedRecordPayload(subject, ceID, data)...)
}

// Record signature headers. A message signed alone carries HeaderSigner
// and HeaderSignature (over SignedPayload: SignedRecordPayload, and the
// HeaderNotAfter of a command that has one). A message signed in a
// batch (ADR 17) carries HeaderSignatureBatch as well: "<n>.<i>.<proof>",
// the batch's size n, the message's index i in it, and the Merkle proof
// from the message's leaf to the batch's root (base64 raw URL of the
// concatenated 32-byte sibling hashes, leaf to root); HeaderSignature is
// then the signature over BatchSignedPayload(n, root). Leaf:
// SHA-256(0x00 || SignedPayload); node: SHA-256(0x01 || left ||
// right); a level's odd last node is carried up unchanged.
const (
	HeaderSigner         = "Sbx-Signer"
	HeaderSignature      = "Sbx-Signature"
	HeaderSignatureBatch = "Sbx-Signature-Batch"
)

// batchSignedPrefix starts what a batch's signature covers. It holds
// spaces, which no subject does, so a batch signature is never also the
// signature of a SignedRecordPayload.
const batchSignedPrefix = "sbx signed batch v1\n"

// BatchSignedPayload is what a batch's signature covers: a fixed prefix,
// the batch's size and its Merkle root.
func BatchSignedPayload(n int, root []byte) []byte {
	b := make([]byte, 0, len(batchSignedPrefix)+12+len(root))
	b = append(b, batchSignedPrefix...)
	b = append(b, itoa(n)...)
	b = append(b, '\n')
	return append(b, root...)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}
