package events

// OpFilesWatch waits for changes under a directory of a sandbox (ADR 18).
const OpFilesWatch = "files.watch"

// CapFilesWatch: the backend serves files.watch.
const CapFilesWatch Capability = "files_watch"

// Bounds of files.watch.
const (
	DefaultWatchTimeoutMS = 10_000
	MaxWatchTimeoutMS     = 60_000
	DefaultWatchEvents    = 256
	MaxWatchEvents        = 1024
)

// FilesWatchRequest is sbx.api.v1.files.watch: a long poll. The worker
// watches the directory Path (not its subdirectories) as the sandbox user
// and answers once events came and 100 ms passed without more, once
// MaxEvents came, or at TimeoutMS with none. Changes before the watch is
// set up, or between two calls, are not seen: compare files.list when that
// matters.
type FilesWatchRequest struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	// TimeoutMS bounds the wait: default 10 000, at most 60 000.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MaxEvents bounds the answer: default 256, at most 1024.
	MaxEvents int `json:"max_events,omitempty"`
}

// File event types, as fsnotify (and E2B's envd) name them: a rename is
// "rename" for the old name and "create" for the new one.
const (
	FileCreate = "create"
	FileWrite  = "write"
	FileRemove = "remove"
	FileRename = "rename"
)

// FileEvent is one change in a watched directory.
type FileEvent struct {
	Type  string `json:"type"`
	Path  string `json:"path"`
	IsDir bool   `json:"is_dir,omitempty"`
}

// FilesWatchReply answers files.watch. Truncated: more events came than
// MaxEvents (the rest are dropped), or events whose path is over 4,096 bytes
// (which no reply can carry) were dropped. Gone: the directory itself was
// removed or renamed away.
type FilesWatchReply struct {
	Events    []FileEvent `json:"events"`
	Truncated bool        `json:"truncated,omitempty"`
	Gone      bool        `json:"gone,omitempty"`
}

// WithDefaults is r with a zero TimeoutMS and MaxEvents set to their
// defaults and both held to their bounds: what a backend passes on (an
// agent refuses a watch of 0 events).
func (r FilesWatchRequest) WithDefaults() FilesWatchRequest {
	if r.TimeoutMS <= 0 {
		r.TimeoutMS = DefaultWatchTimeoutMS
	}
	if r.MaxEvents <= 0 {
		r.MaxEvents = DefaultWatchEvents
	}
	r.TimeoutMS, r.MaxEvents = min(r.TimeoutMS, MaxWatchTimeoutMS), min(r.MaxEvents, MaxWatchEvents)
	return r
}

// Validate checks a files.watch request.
func (r *FilesWatchRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPath(r.Path); e != nil {
		return e
	}
	if r.TimeoutMS < 0 || r.TimeoutMS > MaxWatchTimeoutMS {
		return invalid("timeout_ms", "timeout_ms %d is not 0..%d", r.TimeoutMS, MaxWatchTimeoutMS)
	}
	if r.MaxEvents < 0 || r.MaxEvents > MaxWatchEvents {
		return invalid("max_events", "max_events %d is not 0..%d", r.MaxEvents, MaxWatchEvents)
	}
	return nil
}
