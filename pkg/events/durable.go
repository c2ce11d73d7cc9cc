package events

import (
	"strings"
	"time"
)

// Durable sandboxes: pause and resume, snapshots and forks.
//
// A snapshot is the sandbox's writable state (its work directory, home,
// /tmp: whatever the backend lets the sandbox user write) as a compressed
// tar in the object store BucketSnapshots, readable only by the services.
// It is stored as two objects: SnapshotDataName (a zstd-compressed tar), then
// SnapshotManifestName;
// a snapshot without its manifest is incomplete and is never resumed or
// forked. Memory and running processes are not kept (SnapshotInfo.Memory
// says so): a resumed or forked sandbox starts with fresh processes.
const (
	// OpPause snapshots a sandbox and removes its container; the record
	// stays, in state paused, and the same id resumes later. Idempotent.
	OpPause = "pause"
	// OpResume brings a paused sandbox back on any worker of its backend.
	OpResume = "resume"
	// OpSnapshot stores a snapshot while the sandbox keeps running.
	OpSnapshot        = "snapshot"
	OpSnapshotsList   = "snapshots.list"
	OpSnapshotsDelete = "snapshots.delete"
)

// StatePaused is a sandbox whose state is kept in a snapshot and that holds
// no container, CPU or memory on any worker.
const StatePaused State = "paused"

// CapSnapshot: the backend takes snapshots and forks from them (CapPause:
// it pauses and resumes).
const CapSnapshot Capability = "snapshot"

// BucketSnapshots is the object store of snapshots.
const BucketSnapshots = "sbx_snapshots"

// The values of CreateRequest.OnDeadline.
const (
	OnDeadlineKill  = "kill"
	OnDeadlinePause = "pause"
)

// The kinds of a snapshot.
const (
	SnapshotKindSnapshot = "snapshot" // taken by the snapshot op
	SnapshotKindPause    = "pause"    // the state of a paused sandbox
)

// SnapshotContentFS says what a snapshot holds: the files of the sandbox's
// writable places with their owners and modes; never memory or processes.
const SnapshotContentFS = "filesystem"

// Bounds of the durable operations.
const (
	MaxSnapshotNameBytes = 128
	// MaxSnapshotRetentionS bounds a snapshot's or a paused sandbox's
	// retention (the operator's maximum may be lower).
	MaxSnapshotRetentionS = 90 * 24 * 3600
)

// SnapshotDataName and SnapshotManifestName are a snapshot's objects in
// BucketSnapshots: the data (a zstd-compressed tar) first, the manifest
// (SnapshotManifest as JSON) last.
func SnapshotDataName(snapshotID string) string     { return snapshotID + "/data" }
func SnapshotManifestName(snapshotID string) string { return snapshotID + "/manifest" }

// NewSnapshotID returns a new snapshot id (ValidID, prefixed "snap-").
func NewSnapshotID() string { return "snap-" + NewID() }

// DurableState is what a sandbox's registry record keeps of its durability.
type DurableState struct {
	// OnDeadline is OnDeadlineKill or OnDeadlinePause.
	OnDeadline string `json:"on_deadline,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
	// TimeoutS is the lifetime a resume gives when it names none.
	TimeoutS int `json:"timeout_s,omitempty"`
	// SnapshotID is the snapshot a paused sandbox resumes from; Store the
	// bucket it lives in.
	SnapshotID string     `json:"snapshot_id,omitempty"`
	Store      string     `json:"store,omitempty"`
	PausedAt   *time.Time `json:"paused_at,omitempty"`
	// ExpiresAt is when a paused sandbox is removed with its snapshot.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// ForkOf is the snapshot a forked sandbox was created from.
	ForkOf string `json:"fork_of,omitempty"`
}

// PauseRequest is sbx.api.v1.pause.
type PauseRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// PauseReply answers pause once the sandbox is paused.
type PauseReply struct {
	SandboxID  string `json:"sandbox_id"`
	State      State  `json:"state"`
	SnapshotID string `json:"snapshot_id"`
	// Bytes is the compressed size of the snapshot.
	Bytes int64 `json:"bytes"`
	// Content is SnapshotContentFS; Memory is false: running processes
	// and memory are not kept.
	Content       string     `json:"content"`
	Memory        bool       `json:"memory"`
	AlreadyPaused bool       `json:"already_paused,omitempty"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
}

// ResumeRequest is sbx.api.v1.resume. TimeoutS is the new lifetime (0: the
// one it was created with).
type ResumeRequest struct {
	SandboxID string `json:"sandbox_id"`
	TimeoutS  int    `json:"timeout_s,omitempty"`
}

// ResumeReply answers resume once the sandbox runs again.
type ResumeReply struct {
	SandboxID    string        `json:"sandbox_id"`
	Backend      string        `json:"backend"`
	Worker       string        `json:"worker,omitempty"`
	State        State         `json:"state"`
	Isolation    IsolationTier `json:"isolation"`
	Capabilities Capabilities  `json:"capabilities"`
	Deadline     time.Time     `json:"deadline"`
	SnapshotID   string        `json:"snapshot_id,omitempty"`
	// Content is what was restored (SnapshotContentFS); Memory is false.
	Content        string `json:"content"`
	Memory         bool   `json:"memory"`
	AlreadyRunning bool   `json:"already_running,omitempty"`
}

// SnapshotRequest is sbx.api.v1.snapshot: a snapshot of a running sandbox,
// which keeps running.
type SnapshotRequest struct {
	SandboxID string `json:"sandbox_id"`
	Name      string `json:"name,omitempty"`
}

// SnapshotInfo describes a complete snapshot (the snapshot op's reply and
// an entry of snapshots.list).
type SnapshotInfo struct {
	SnapshotID string     `json:"snapshot_id"`
	Name       string     `json:"name,omitempty"`
	SandboxID  string     `json:"sandbox_id"`
	Kind       string     `json:"kind"`
	Backend    string     `json:"backend"`
	Image      string     `json:"image,omitempty"`
	Bytes      int64      `json:"bytes"`
	Files      int64      `json:"files"`
	Digest     string     `json:"digest"`
	Content    string     `json:"content"`
	Memory     bool       `json:"memory"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	DurationMS int64      `json:"duration_ms,omitempty"`
}

// SnapshotsListRequest is sbx.api.v1.snapshots.list; SandboxID filters.
type SnapshotsListRequest struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// SnapshotsListReply lists the caller's complete snapshots, newest first.
type SnapshotsListReply struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// SnapshotsDeleteRequest is sbx.api.v1.snapshots.delete. A paused
// sandbox's own snapshot is deleted by killing the sandbox.
type SnapshotsDeleteRequest struct {
	SnapshotID string `json:"snapshot_id"`
}

// SnapshotsDeleteReply answers snapshots.delete.
type SnapshotsDeleteReply struct {
	SnapshotID string `json:"snapshot_id"`
	Deleted    bool   `json:"deleted"`
}

// SnapshotManifest is the manifest object of a snapshot, written by the
// worker after the data: its presence makes the snapshot complete. It
// holds the create command the sandbox was made with (secrets sealed to
// the backend's key, never in clear), so that a resume re-creates it.
type SnapshotManifest struct {
	SnapshotInfo
	Tenant string `json:"tenant"`
	Owner  string `json:"owner,omitempty"`
	// DataObject is the data object's name; DataDigest the object store's
	// digest of it (SHA-256 of the stored bytes, checked when it is read
	// to its end); Compression is "zstd" (each frame checksummed).
	DataObject  string        `json:"data_object"`
	DataDigest  string        `json:"data_digest"`
	Compression string        `json:"compression"`
	Roots       []string      `json:"roots"`
	Command     CreateCommand `json:"command"`
}

// Validate checks a pause request.
func (r *PauseRequest) Validate() *Error { return checkID("sandbox_id", r.SandboxID, true) }

// Validate checks a resume request.
func (r *ResumeRequest) Validate() *Error {
	if r.TimeoutS < 0 || r.TimeoutS > MaxLifetimeSeconds {
		return invalid("timeout_s", "%d is out of range 0..%d", r.TimeoutS, MaxLifetimeSeconds)
	}
	return checkID("sandbox_id", r.SandboxID, true)
}

// Validate checks a snapshot request.
func (r *SnapshotRequest) Validate() *Error {
	if len(r.Name) > MaxSnapshotNameBytes {
		return Errorf(CodePayloadTooLarge, "name is %d bytes; the limit is %d", len(r.Name), MaxSnapshotNameBytes).With("field", "name")
	}
	if strings.ContainsAny(r.Name, "\x00\n\r") {
		return invalid("name", "control characters are not allowed")
	}
	return checkID("sandbox_id", r.SandboxID, true)
}

// Validate checks a snapshots.list request.
func (r *SnapshotsListRequest) Validate() *Error {
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return invalid("limit", "%d is out of range 0..%d", r.Limit, MaxListLimit)
	}
	return checkID("sandbox_id", r.SandboxID, false)
}

// Validate checks a snapshots.delete request.
func (r *SnapshotsDeleteRequest) Validate() *Error {
	return checkID("snapshot_id", r.SnapshotID, true)
}

// validateDurable checks create's durable fields.
func (r *CreateRequest) validateDurable() *Error {
	switch r.OnDeadline {
	case "", OnDeadlineKill, OnDeadlinePause:
	default:
		return invalid("on_deadline", "%q: want %q or %q", r.OnDeadline, OnDeadlineKill, OnDeadlinePause)
	}
	return checkID("from_snapshot", r.FromSnapshot, false)
}

// Durable reports whether a create asks for anything durable.
func (r *CreateRequest) Durable() bool {
	return r.OnDeadline == OnDeadlinePause || r.AutoResume || r.FromSnapshot != ""
}
