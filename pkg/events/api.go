package events

import (
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"time"
	"unicode/utf8"
)

// Limits of the protocol v1 that every implementation applies.
const (
	MaxRequestBytes      = 1 << 20 // a request larger than this is SBX_E1006
	MaxLifetimeSeconds   = 24 * 3600
	MaxMetadataEntries   = 64
	MaxMetadataValueSize = 1024
	MaxEnvEntries        = 256
	MaxArgvBytes         = 256 << 10
	MaxInlineFileBytes   = 512 << 10
	// DefaultBufferedOutputCap is the per-stream cap of a non-streamed exec's
	// reply; beyond it output is dropped and truncated is set.
	DefaultBufferedOutputCap = 256 << 10
	// DefaultStreamOutputCap is the per-stream cap of a streamed exec.
	DefaultStreamOutputCap = 1 << 30
	// MaxTimeoutMS bounds every timeout_ms of a request: no process
	// outlives the longest sandbox lifetime. A larger value is SBX_E1007
	// at decode (it would overflow a time.Duration downstream).
	MaxTimeoutMS = int64(MaxLifetimeSeconds) * 1000
	// MaxOutputLimit bounds exec output_limit (workers apply their own,
	// lower, maximum: SBX_E1705).
	MaxOutputLimit = int64(DefaultStreamOutputCap)
	// MaxFileParts bounds the parts of one file in the object store
	// (files.get, files.put, a files.write ref).
	MaxFileParts = 16384
	// MaxFileMode bounds files.write mode (permission and special bits).
	MaxFileMode = 0o7777
	// MaxDiskMB bounds resources.disk_mb at decode (the router and the
	// workers apply the operator's lower limits).
	MaxDiskMB = 1 << 24
	// MaxListLimit bounds list's limit.
	MaxListLimit = 10000
)

// Encoding values for byte fields.
const (
	EncodingUTF8   = ""       // the string is the bytes
	EncodingBase64 = "base64" // the string is standard base64 of the bytes
)

// Resources asks for limits; zero means the class or backend default.
type Resources struct {
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int     `json:"memory_mb,omitempty"`
	PIDs     int     `json:"pids,omitempty"`
	DiskMB   int     `json:"disk_mb,omitempty"`
}

// CreateRequest is sbx.api.v1.create.
type CreateRequest struct {
	Class            string            `json:"class,omitempty"`
	DSN              string            `json:"dsn,omitempty"`
	TimeoutS         int               `json:"timeout_s"`
	RequireIsolation IsolationTier     `json:"require_isolation,omitempty"`
	Network          *NetworkPolicy    `json:"network,omitempty"`
	Resources        *Resources        `json:"resources,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Secrets          map[string]string `json:"secrets,omitempty"`
	// SealedSecrets carries the secrets sealed to the backend's worker key
	// (BackendInfo.SealKey), so that they are in clear nowhere on the bus.
	// At most one of Secrets and SealedSecrets; the router seals Secrets
	// before it forwards them and clears the field.
	SealedSecrets  *SealedBox        `json:"sealed_secrets,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Requires       []Capability      `json:"requires,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	// SandboxID lets a client choose the id, so that it can kill a sandbox
	// whose create it abandoned. Optional; must be ValidID and unused.
	SandboxID string `json:"sandbox_id,omitempty"`
	Owner     string `json:"owner,omitempty"`
	// Ports are published once the sandbox runs (ports.expose each); the
	// sandbox's backend must advertise the ports capability.
	Ports []PortSpec `json:"ports,omitempty"`
	// FromSnapshot starts the sandbox from a snapshot (a fork): its files
	// are the snapshot's before the first exec (durable.go).
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// OnDeadline is OnDeadlineKill (default) or OnDeadlinePause: a sandbox
	// that reaches its lifetime is paused instead of removed.
	OnDeadline string `json:"on_deadline,omitempty"`
	// AutoResume: an operation on the paused sandbox resumes it first
	// instead of answering SandboxPaused.
	AutoResume bool `json:"auto_resume,omitempty"`
}

// CreateReply answers create.
type CreateReply struct {
	SandboxID    string        `json:"sandbox_id"`
	Backend      string        `json:"backend"`
	Class        string        `json:"class"`
	Isolation    IsolationTier `json:"isolation"`
	Capabilities Capabilities  `json:"capabilities"`
	Deadline     time.Time     `json:"deadline"`
	Warnings     []string      `json:"warnings,omitempty"`
	// Ports are the ports the create published (CreateRequest.Ports), each
	// private one's token shown here only.
	Ports []PortInfo `json:"ports,omitempty"`
}

// ExecRequest is sbx.api.v1.exec.
type ExecRequest struct {
	SandboxID string            `json:"sandbox_id"`
	Cmd       []string          `json:"cmd"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	// StdinEncoding is "" (stdin is UTF-8 text) or "base64".
	StdinEncoding string `json:"stdin_encoding,omitempty"`
	// KeepStdinOpen leaves stdin open after Stdin for later stdin requests
	// (streamed execs only).
	KeepStdinOpen bool  `json:"keep_stdin_open,omitempty"`
	TimeoutMS     int64 `json:"timeout_ms,omitempty"`
	Stream        bool  `json:"stream,omitempty"`
	// ProcessID lets the client name the process so that it can signal it
	// before the reply arrives. Optional; must be ValidID.
	ProcessID string `json:"process_id,omitempty"`
	// OutputLimit caps each of stdout and stderr, in bytes; 0 = default.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// OutputTail (buffered execs only) keeps of a stream longer than the
	// cap its first half and its last half (its real end) instead of its
	// first cap bytes; the reply's stdout_cut and stderr_cut say where the
	// bytes between were dropped.
	OutputTail bool `json:"output_tail,omitempty"`
	// TTY runs the process on a pseudo-terminal (stderr merged into
	// stdout) of Rows x Cols, 0 meaning 24x80; with keep_stdin_open, stdin
	// requests are its keyboard.
	TTY  bool `json:"tty,omitempty"`
	Rows int  `json:"rows,omitempty"`
	Cols int  `json:"cols,omitempty"`
}

// StdinBytes decodes Stdin.
func (r ExecRequest) StdinBytes() ([]byte, error) { return decodeBytes(r.Stdin, r.StdinEncoding) }

// ExecResult is the reply of a non-streamed exec, and the body of a streamed
// exec's exit marker (with Streamed set and no output).
type ExecResult struct {
	ProcessID  string `json:"process_id,omitempty"`
	ExitCode   int    `json:"exit_code"`
	Stdout     []byte `json:"-"`
	Stderr     []byte `json:"-"`
	Streamed   bool   `json:"streamed"`
	TimedOut   bool   `json:"timed_out"`
	OOMKilled  bool   `json:"oom_killed"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
	// Signal names the signal that ended the process, if one did.
	Signal string `json:"signal,omitempty"`
	// StdoutBytes and StderrBytes count all output, also what was truncated.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// StdoutCut and StderrCut, for an exec with output_tail, are the
	// offset in Stdout (Stderr) where StdoutBytes-len(Stdout) bytes were
	// dropped between the head and the tail kept; 0 when none were.
	StdoutCut int64 `json:"stdout_cut,omitempty"`
	StderrCut int64 `json:"stderr_cut,omitempty"`
	// Err is set on a streamed exec's exit marker when the process failed
	// for a reason other than its own exit (timeout, start failure, sandbox
	// gone). A non-streamed exec reports such failures as an error reply.
	Err *Error `json:"sbx_error,omitempty"`
}

type execResultWire struct {
	ProcessID   string `json:"process_id,omitempty"`
	ExitCode    int    `json:"exit_code"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	Encoding    string `json:"encoding,omitempty"`
	Streamed    bool   `json:"streamed"`
	TimedOut    bool   `json:"timed_out"`
	OOMKilled   bool   `json:"oom_killed"`
	Truncated   bool   `json:"truncated"`
	DurationMS  int64  `json:"duration_ms"`
	Signal      string `json:"signal,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	StdoutCut   int64  `json:"stdout_cut,omitempty"`
	StderrCut   int64  `json:"stderr_cut,omitempty"`
	Err         *Error `json:"sbx_error,omitempty"`
}

// MarshalJSON writes stdout and stderr as strings when both are valid UTF-8,
// and otherwise both as base64 with "encoding":"base64": output is never
// silently mangled.
func (r ExecResult) MarshalJSON() ([]byte, error) {
	w := execResultWire{ProcessID: r.ProcessID, ExitCode: r.ExitCode, Streamed: r.Streamed, TimedOut: r.TimedOut,
		OOMKilled: r.OOMKilled, Truncated: r.Truncated, DurationMS: r.DurationMS, Signal: r.Signal,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, StdoutCut: r.StdoutCut, StderrCut: r.StderrCut, Err: r.Err}
	if utf8.Valid(r.Stdout) && utf8.Valid(r.Stderr) {
		w.Stdout, w.Stderr = string(r.Stdout), string(r.Stderr)
	} else {
		w.Encoding = EncodingBase64
		w.Stdout = base64.StdEncoding.EncodeToString(r.Stdout)
		w.Stderr = base64.StdEncoding.EncodeToString(r.Stderr)
	}
	return json.Marshal(w)
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (r *ExecResult) UnmarshalJSON(b []byte) error {
	var w execResultWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out, err := decodeBytes(w.Stdout, w.Encoding)
	if err != nil {
		return err
	}
	errb, err := decodeBytes(w.Stderr, w.Encoding)
	if err != nil {
		return err
	}
	*r = ExecResult{ProcessID: w.ProcessID, ExitCode: w.ExitCode, Stdout: out, Stderr: errb, Streamed: w.Streamed,
		TimedOut: w.TimedOut, OOMKilled: w.OOMKilled, Truncated: w.Truncated, DurationMS: w.DurationMS,
		Signal: w.Signal, StdoutBytes: w.StdoutBytes, StderrBytes: w.StderrBytes, StdoutCut: w.StdoutCut, StderrCut: w.StderrCut,
		Err: w.Err}
	return nil
}

func decodeBytes(s, encoding string) ([]byte, error) {
	switch encoding {
	case EncodingUTF8:
		if s == "" {
			return nil, nil
		}
		return []byte(s), nil
	case EncodingBase64:
		return base64.StdEncoding.DecodeString(s)
	default:
		return nil, Errorf(CodeInvalidValue, "unknown encoding %q (want \"\" or \"base64\")", encoding).With("field", "encoding")
	}
}

// EncodeBytes renders bytes for a JSON string field: as is when valid UTF-8,
// else base64 with the returned encoding.
func EncodeBytes(b []byte) (s, encoding string) {
	if utf8.Valid(b) {
		return string(b), EncodingUTF8
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// StreamSubjects names where a streamed process's output goes.
type StreamSubjects struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Exit   string `json:"exit"`
	// Filter matches all three, for one ordered consumer on Stream.
	Filter string `json:"filter"`
	Stream string `json:"stream"`
	// Live is the core-NATS live copy (no replay) for light clients.
	Live string `json:"live"`
}

// StreamSubjectsFor builds the subjects of one process of a tenant.
func StreamSubjectsFor(tenant, sandbox, process string) StreamSubjects {
	return StreamSubjects{
		Stdout: OutputSubject(tenant, sandbox, process, Stdout),
		Stderr: OutputSubject(tenant, sandbox, process, Stderr),
		Exit:   OutputSubject(tenant, sandbox, process, Exit),
		Filter: OutputFilter(tenant, sandbox, process),
		Stream: StreamOutput,
		Live:   LiveFilter(tenant, sandbox, process),
	}
}

// ExecStreamReply answers a streamed exec once the process has started.
type ExecStreamReply struct {
	SandboxID string         `json:"sandbox_id"`
	ProcessID string         `json:"process_id"`
	Subjects  StreamSubjects `json:"subjects"`
}

// RunCodeRequest is sbx.api.v1.run_code.
type RunCodeRequest struct {
	SandboxID string `json:"sandbox_id"`
	Language  string `json:"language,omitempty"` // default python
	Code      string `json:"code"`
	ContextID string `json:"context_id,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	ProcessID string `json:"process_id,omitempty"`
}

// RichResult is one rich output of run_code, by MIME-like kind.
type RichResult struct {
	Text         string         `json:"text,omitempty"`
	HTML         string         `json:"html,omitempty"`
	Markdown     string         `json:"markdown,omitempty"`
	PNG          string         `json:"png,omitempty"` // base64
	JPEG         string         `json:"jpeg,omitempty"`
	SVG          string         `json:"svg,omitempty"`
	JSON         map[string]any `json:"json,omitempty"`
	IsMainResult bool           `json:"is_main_result,omitempty"`
}

// CodeError is an exception raised by run_code's code.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// RunCodeReply answers run_code.
type RunCodeReply struct {
	ExecResult
	Results []RichResult `json:"-"`
	Error   *CodeError   `json:"-"`
}

// MarshalJSON flattens the embedded ExecResult next to results and error.
func (r RunCodeReply) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(r.ExecResult)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(base, &m); err != nil {
		return nil, err
	}
	results := r.Results
	if results == nil {
		results = []RichResult{}
	}
	if m["results"], err = json.Marshal(results); err != nil {
		return nil, err
	}
	if r.Error != nil {
		if m["error"], err = json.Marshal(r.Error); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON is the inverse of MarshalJSON.
func (r *RunCodeReply) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.ExecResult); err != nil {
		return err
	}
	var extra struct {
		Results []RichResult `json:"results"`
		Error   *CodeError   `json:"error"`
	}
	if err := json.Unmarshal(b, &extra); err != nil {
		return err
	}
	r.Results, r.Error = extra.Results, extra.Error
	return nil
}

// FileRef points at an object in the sbx_files object store.
type FileRef struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Digest string `json:"digest,omitempty"`
	// Parts > 0: the file is Parts objects FilePartName(Name, 0…Parts-1),
	// each at most MaxInlineFileBytes, so that files.get and files.put can
	// move it one request at a time.
	Parts int `json:"parts,omitempty"`
}

// FilesWriteRequest is sbx.api.v1.files.write: Data inline or Ref.
type FilesWriteRequest struct {
	SandboxID string   `json:"sandbox_id"`
	Path      string   `json:"path"`
	Data      string   `json:"data,omitempty"` // base64
	Ref       *FileRef `json:"ref,omitempty"`
	Mode      uint32   `json:"mode,omitempty"`
}

// FilesWriteReply answers files.write.
type FilesWriteReply struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// FilesReadRequest is sbx.api.v1.files.read.
type FilesReadRequest struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
}

// FilesReadReply answers files.read: Data inline (base64) for small files,
// Ref for files larger than MaxInlineFileBytes.
type FilesReadReply struct {
	Path string   `json:"path"`
	Size int64    `json:"size"`
	Data string   `json:"data,omitempty"`
	Ref  *FileRef `json:"ref,omitempty"`
}

// FilesListRequest is sbx.api.v1.files.list.
type FilesListRequest struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
}

// FileInfo is one entry of files.list.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

// FilesListReply answers files.list.
type FilesListReply struct {
	Entries []FileInfo `json:"entries"`
}

// SignalRequest is sbx.api.v1.signal.
type SignalRequest struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Signal    string `json:"signal"` // KILL, TERM, INT, HUP, QUIT, USR1, USR2
}

// StdinRequest is sbx.api.v1.stdin.
type StdinRequest struct {
	SandboxID string `json:"sandbox_id"`
	ProcessID string `json:"process_id"`
	Data      string `json:"data,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	Close     bool   `json:"close,omitempty"`
}

// DataBytes decodes Data.
func (r StdinRequest) DataBytes() ([]byte, error) { return decodeBytes(r.Data, r.Encoding) }

// OKReply answers ops that return nothing else.
type OKReply struct {
	OK bool `json:"ok"`
}

// KillRequest is sbx.api.v1.kill.
type KillRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// KillReply answers kill once the sandbox is gone.
type KillReply struct {
	SandboxID   string `json:"sandbox_id"`
	State       State  `json:"state"`
	AlreadyGone bool   `json:"already_gone"`
}

// GetRequest is sbx.api.v1.get.
type GetRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// ListRequest is sbx.api.v1.list. Every filter is optional and they combine with AND.
type ListRequest struct {
	Backend  string            `json:"backend,omitempty"`
	State    State             `json:"state,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Owner    string            `json:"owner,omitempty"`
	Limit    int               `json:"limit,omitempty"`
}

// ListReply answers list.
type ListReply struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// SetTimeoutRequest is sbx.api.v1.set_timeout: the deadline becomes now + timeout_s.
type SetTimeoutRequest struct {
	SandboxID string `json:"sandbox_id"`
	TimeoutS  int    `json:"timeout_s"`
}

// SetTimeoutReply answers set_timeout.
type SetTimeoutReply struct {
	SandboxID string    `json:"sandbox_id"`
	Deadline  time.Time `json:"deadline"`
}

// BackendsRequest is sbx.api.v1.backends (empty).
type BackendsRequest struct{}

// BackendInfo describes one backend as its live workers advertise it.
type BackendInfo struct {
	Name         string        `json:"name"`
	Isolation    IsolationTier `json:"isolation"`
	Capabilities Capabilities  `json:"capabilities"`
	Workers      []WorkerLease `json:"workers"`
	Capacity     int           `json:"capacity"`
	Load         int           `json:"load"`
	// SealKey is the public xkey to seal secrets to for this backend (all
	// its workers share it); empty when no worker advertises one.
	SealKey string `json:"seal_key,omitempty"`
}

// BackendsReply answers backends.
type BackendsReply struct {
	Backends []BackendInfo `json:"backends"`
	Classes  []ClassInfo   `json:"classes"`
}

// ClassInfo is one class of the routing file.
type ClassInfo struct {
	Name             string        `json:"name"`
	Backend          string        `json:"backend"`
	RequireIsolation IsolationTier `json:"require_isolation,omitempty"`
	Default          bool          `json:"default,omitempty"`
}

// FileMode is Mode as Go's fs.FileMode: the permission bits and Go's type
// bits (fs.ModeDir, fs.ModeSymlink…), as files.list sends them.
func (f FileInfo) FileMode() fs.FileMode { return fs.FileMode(f.Mode) }
