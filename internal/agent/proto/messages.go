package proto

import (
	"encoding/json"
	"path"
	"strings"
)

// Version is the protocol version; a worker refuses an agent of another.
const Version = 1

// Hello is the first message each way on stream 0. The worker's Nonce comes
// back in the agent's Hello, so a reply left over from an earlier worker on
// the same byte stream is not taken for this one's.
type Hello struct {
	Version int    `json:"version"`
	Nonce   string `json:"nonce"`
	Agent   string `json:"agent,omitempty"` // build of the agent
	PID     int    `json:"pid,omitempty"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	Procs   int    `json:"procs,omitempty"` // the agent's GOMAXPROCS
	// Features are the optional ops this agent serves (FeatureDial); a
	// worker asks only for what its agent names, since an op an agent does
	// not know ends its connection as a protocol violation.
	Features []string `json:"features,omitempty"`
}

// FeatureDial: the agent serves OpDial.
const FeatureDial = "dial"

// HasFeature reports whether the hello names feature f.
func (h Hello) HasFeature(f string) bool {
	for _, x := range h.Features {
		if x == f {
			return true
		}
	}
	return false
}

// Ops a Request may ask for.
const (
	OpExec   = "exec"
	OpRead   = "read"
	OpWrite  = "write"
	OpList   = "list"
	OpStat   = "stat"
	OpMkdir  = "mkdir"
	OpRemove = "remove"
	OpOOM    = "oom"  // the cgroup's OOM kill counter
	OpKill   = "kill" // kill every process carrying a mark (a lost exec's tree)
	// OpAttach re-attaches to the exec started with Mark (by this or an
	// earlier connection): its output from OutFrom/ErrFrom on, then its
	// Result, on the new stream (ADR 18).
	OpAttach = "attach"
	// OpWatch waits for changes in the directory Path, at most TimeoutMS
	// and Max events (files.watch).
	OpWatch = "watch"
	// OpDial connects to Port on the sandbox's loopback (127.0.0.1, then
	// ::1) and carries the connection's bytes as data frames both ways
	// (TConnected first, TEOF for a half-close, the Result at the end).
	OpDial = "dial"
)

// Request opens a stream.
type Request struct {
	Op string `json:"op"`

	// exec
	Argv      []string `json:"argv,omitempty"`
	Env       []string `json:"env,omitempty"` // KEY=VALUE, over the agent's own start environment
	Cwd       string   `json:"cwd,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	// Mark is the process id (SBX_PROCESS_ID) that marks the process's tree.
	Mark string `json:"mark,omitempty"`
	// TTY runs the process on a pseudo-terminal of Rows x Cols (stderr
	// merged into stdout; TResize changes the size).
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`

	// attach: the byte offsets of stdout and stderr the worker has
	// stored; the agent replays from there.
	OutFrom int64 `json:"out_from,omitempty"`
	ErrFrom int64 `json:"err_from,omitempty"`

	// files
	Path    string `json:"path,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	Size    int64  `json:"size,omitempty"`    // write: exact byte count
	Max     int64  `json:"max,omitempty"`     // read: refuse larger files
	Parents bool   `json:"parents,omitempty"` // write, mkdir: make missing parents
	All     bool   `json:"all,omitempty"`     // remove: recursively

	// dial
	Port int `json:"port,omitempty"`
}

// Bounds on requests, checked by the agent.
const (
	MaxArgs    = 4096
	MaxEnv     = 4096
	MaxPath    = 4096
	MaxEntries = 10000
)

// Validate bounds a request.
func (r *Request) Validate() error {
	switch r.Op {
	case OpExec:
		if len(r.Argv) == 0 || len(r.Argv) > MaxArgs || len(r.Env) > MaxEnv {
			return protoErr("exec: %d args, %d env", len(r.Argv), len(r.Env))
		}
		for _, e := range r.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				return protoErr("exec: env entry without a name")
			}
		}
		if r.TimeoutMS < 0 {
			return protoErr("exec: negative timeout")
		}
	case OpWatch:
		if err := CheckPath(r.Path); err != nil {
			return err
		}
		if r.TimeoutMS <= 0 || r.TimeoutMS > 10*60*1000 || r.Max <= 0 || r.Max > MaxWatchEvents {
			return protoErr("watch: timeout %d ms, %d events", r.TimeoutMS, r.Max)
		}
	case OpRead, OpWrite, OpList, OpStat, OpMkdir, OpRemove:
		if err := CheckPath(r.Path); err != nil {
			return err
		}
		if r.Size < 0 || r.Max < 0 {
			return protoErr("%s: negative size", r.Op)
		}
	case OpDial:
		if r.Port < 1 || r.Port > 65535 {
			return protoErr("dial: port %d", r.Port)
		}
	case OpOOM:
	case OpKill:
		if r.Mark == "" {
			return protoErr("kill: no mark")
		}
	case OpAttach:
		if r.Mark == "" || r.OutFrom < 0 || r.ErrFrom < 0 {
			return protoErr("attach: no mark or a negative offset")
		}
	default:
		return protoErr("unknown op %q", r.Op)
	}
	return nil
}

// CheckPath accepts an absolute, clean path with no NUL byte.
func CheckPath(p string) error {
	if p == "" || len(p) > MaxPath || strings.IndexByte(p, 0) >= 0 || !path.IsAbs(p) || path.Clean(p) != p {
		return protoErr("path %q is not absolute and clean", p)
	}
	return nil
}

// Signal asks for a signal to the stream's process (Group: its process
// group).
type Signal struct {
	Signal int  `json:"signal"`
	Group  bool `json:"group,omitempty"`
}

// Resize is a PTY's new window size.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Result ends a stream: an exit status, a file operation's outcome, or an
// error.
type Result struct {
	Exit  *Exit      `json:"exit,omitempty"`
	Error *Error     `json:"error,omitempty"`
	Files []FileInfo `json:"files,omitempty"`
	Stat  *FileInfo  `json:"stat,omitempty"`
	Bytes int64      `json:"bytes,omitempty"`
	Count int64      `json:"count,omitempty"` // oom: kills so far; kill: processes killed; watch: WatchTruncated|WatchGone|WatchDropped
	// Events are a watch's.
	Events []WatchEvent `json:"events,omitempty"`
	// Dropped counts a watch's events left out because their path is over
	// MaxPath (a long name in a directory whose path is near the bound):
	// the API cannot carry them (WatchDropped, and WatchTruncated for a
	// worker that knows only that).
	Dropped int64 `json:"dropped,omitempty"`
}

// A watch's Result.Count bits.
const (
	WatchTruncated = 1 // more events came than were sent
	WatchGone      = 2 // the directory itself was removed or moved
	WatchDropped   = 4 // events were dropped (Dropped): paths over MaxPath
)

// MaxWatchEvents bounds a watch's events.
const MaxWatchEvents = 1024

// Watch event types.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename"
)

// WatchEvent is one change in a watched directory.
type WatchEvent struct {
	Type  string `json:"type"`
	Path  string `json:"path"`
	IsDir bool   `json:"is_dir,omitempty"`
}

// Exit is how a process ended.
type Exit struct {
	// StartError says the process never started (not found, not
	// executable, bad cwd); Code is then 126 or 127.
	StartError string `json:"start_error,omitempty"`
	Code       int    `json:"code"`
	Signal     int    `json:"signal,omitempty"`
	CoreDumped bool   `json:"core_dumped,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Killed     bool   `json:"killed,omitempty"` // by a cancel
	MaxRSSKB   int64  `json:"max_rss_kb,omitempty"`
}

// Error kinds.
const (
	ErrNotFound   = "not_found"
	ErrExists     = "exists"
	ErrPermission = "permission"
	ErrForbidden  = "forbidden" // /proc, /sys, /dev
	ErrSymlink    = "symlink"   // a symlink where the op does not follow one
	ErrNotDir     = "not_dir"
	ErrIsDir      = "is_dir"
	ErrNotRegular = "not_regular"
	ErrTooLarge   = "too_large"
	ErrInvalid    = "invalid"
	ErrIO         = "io"
	// ErrLost: an attach asked for output the agent no longer keeps, or
	// for a process it never ran or has forgotten.
	ErrLost = "lost"
	// ErrBusy: too many of this operation in flight in the sandbox.
	ErrBusy = "busy"
	// ErrRefused: a dial found nothing accepting connections on the port.
	ErrRefused = "refused"
	// ErrReserved: a dial asked for a port the agent refuses to carry.
	ErrReserved = "reserved"
	// ErrInternal: the agent failed serving the request (a bug: a panic
	// it recovered from); it goes on serving.
	ErrInternal = "internal"
)

// Error is a failed operation.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Kind + ": " + e.Message }

// FileInfo describes one file.
type FileInfo struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // Go's fs.FileMode bits
	ModTime int64  `json:"mtime_ns"`
	Link    string `json:"link,omitempty"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
}

// Bounds on what the worker accepts from an agent.
const (
	maxMessage = 4096
	maxName    = 4096
)

// Validate bounds a result from an agent.
func (r *Result) Validate() error {
	if e := r.Exit; e != nil {
		if e.Code < 0 || e.Code > 255 || e.Signal < 0 || e.Signal > 64 || len(e.StartError) > maxMessage || e.MaxRSSKB < 0 {
			return protoErr("exit status out of range")
		}
	}
	if e := r.Error; e != nil && (e.Kind == "" || len(e.Kind) > 32 || len(e.Message) > maxMessage) {
		return protoErr("error out of range")
	}
	if len(r.Files) > MaxEntries {
		return protoErr("%d directory entries", len(r.Files))
	}
	for i := range r.Files {
		if err := r.Files[i].validate(); err != nil {
			return err
		}
	}
	if r.Stat != nil {
		if err := r.Stat.validate(); err != nil {
			return err
		}
	}
	if r.Bytes < 0 || r.Count < 0 || r.Dropped < 0 {
		return protoErr("negative count")
	}
	if len(r.Events) > MaxWatchEvents {
		return protoErr("%d watch events", len(r.Events))
	}
	for _, ev := range r.Events {
		switch ev.Type {
		case WatchCreate, WatchWrite, WatchRemove, WatchRename:
		default:
			return protoErr("watch event type %q", ev.Type)
		}
		if CheckPath(ev.Path) != nil {
			return protoErr("watch event path out of range")
		}
	}
	return nil
}

// dropOverlong drops the watch events whose path is over MaxPath and
// otherwise valid, counting them in Dropped.
func (r *Result) dropOverlong() {
	kept := r.Events[:0]
	for _, ev := range r.Events {
		if overlong(ev.Path) {
			r.Dropped++
			r.Count |= WatchTruncated | WatchDropped
			continue
		}
		kept = append(kept, ev)
	}
	r.Events = kept
}

// overlong says p would be a valid path but for its length.
func overlong(p string) bool {
	return len(p) > MaxPath && strings.IndexByte(p, 0) < 0 && path.IsAbs(p) && path.Clean(p) == p
}

func (f *FileInfo) validate() error {
	if f.Name == "" || len(f.Name) > maxName || strings.ContainsAny(f.Name, "/\x00") && f.Name != "/" || f.Size < 0 || len(f.Link) > MaxPath {
		return protoErr("file entry %q out of range", f.Name)
	}
	return nil
}

// DecodeResult parses and validates a result payload. A watch event whose
// path is only too long (legal input in the sandbox: a long name in a
// directory near the bound) is dropped and counted, not a violation.
func DecodeResult(p []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(p, &r); err != nil {
		return Result{}, protoErr("result: %v", err)
	}
	r.dropOverlong()
	if err := r.Validate(); err != nil {
		return Result{}, err
	}
	return r, nil
}

// DecodeHello parses a hello payload.
func DecodeHello(p []byte) (Hello, error) {
	var h Hello
	if err := json.Unmarshal(p, &h); err != nil {
		return Hello{}, protoErr("hello: %v", err)
	}
	if len(h.Nonce) > 64 || len(h.Agent) > 256 || h.Procs < 0 || h.Procs > 1<<16 || len(h.Features) > 32 {
		return Hello{}, protoErr("hello out of range")
	}
	return h, nil
}

// DecodeRequest parses and validates a request payload.
func DecodeRequest(p []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(p, &r); err != nil {
		return Request{}, protoErr("request: %v", err)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}
