package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Decode strictly decodes a JSON request into v: it must be one JSON object
// with no unknown fields and at most MaxRequestBytes long. The error is an
// *Error with SBX_E1006, SBX_E1001 or SBX_E1002.
func Decode(data []byte, v any) *Error {
	if len(data) > MaxRequestBytes {
		return Errorf(CodePayloadTooLarge, "request is %d bytes; the limit is %d", len(data), MaxRequestBytes).With("limit", MaxRequestBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		return Errorf(CodeInvalidRequest, "request must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return classifyDecodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(CodeInvalidRequest, "trailing data after the JSON object")
	}
	return nil
}

func classifyDecodeError(err error) *Error {
	msg := err.Error()
	if strings.HasPrefix(msg, "json: unknown field ") {
		field := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		return Errorf(CodeUnknownField, "unknown field %q", field).With("field", field)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Errorf(CodeInvalidValue, "field %q: want %s, got JSON %s", te.Field, te.Type, te.Value).With("field", te.Field)
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	return Errorf(CodeInvalidRequest, "malformed JSON: %s", msg)
}

func missing(field string) *Error {
	return Errorf(CodeMissingField, "%s is required", field).With("field", field)
}

func invalid(field, format string, args ...any) *Error {
	return Errorf(CodeInvalidValue, field+": "+format, args...).With("field", field)
}

func checkID(field, id string, required bool) *Error {
	if id == "" {
		if required {
			return missing(field)
		}
		return nil
	}
	if !ValidID(id) {
		return Errorf(CodeInvalidID, "%s %q is not a valid id: use 1-%d characters from [a-z0-9_-]", field, truncateForMsg(id), MaxIDLength).With("field", field)
	}
	return nil
}

func truncateForMsg(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func checkStringMap(field string, m map[string]string, maxEntries int) *Error {
	if len(m) > maxEntries {
		return Errorf(CodePayloadTooLarge, "%s has %d entries; the limit is %d", field, len(m), maxEntries).With("field", field)
	}
	for k, v := range m {
		if k == "" {
			return invalid(field, "empty key")
		}
		if len(v) > MaxMetadataValueSize && field == "metadata" {
			return Errorf(CodePayloadTooLarge, "metadata value of %q is %d bytes; the limit is %d", k, len(v), MaxMetadataValueSize).With("field", field)
		}
		if field == "env" || field == "secrets" {
			if strings.ContainsAny(k, "=\x00") {
				return invalid(field, "variable name %q may not contain '=' or NUL", k)
			}
		}
	}
	return nil
}

// Validate checks a create request; it does not resolve the class.
func (r *CreateRequest) Validate() *Error {
	if r.TimeoutS == 0 {
		return Errorf(CodeLifetimeRequired, "timeout_s is required: every sandbox needs a lifetime in seconds").With("field", "timeout_s")
	}
	if r.TimeoutS < 0 || r.TimeoutS > MaxLifetimeSeconds {
		return invalid("timeout_s", "%d is out of range 1..%d", r.TimeoutS, MaxLifetimeSeconds)
	}
	if r.Class != "" && r.DSN != "" {
		return invalid("class", "give class or dsn, not both")
	}
	if _, err := ParseIsolationTier(string(r.RequireIsolation)); err != nil {
		return invalid("require_isolation", "%s", err.Error())
	}
	if r.Network != nil {
		if err := r.Network.Validate(); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return e
			}
			return invalid("network", "%s", err.Error())
		}
	}
	if r.Resources != nil {
		res := r.Resources
		if res.CPUs < 0 || res.CPUs > 64 || res.MemoryMB < 0 || res.MemoryMB > 1<<20 || res.PIDs < 0 || res.PIDs > 1<<20 || res.DiskMB < 0 || res.DiskMB > MaxDiskMB {
			return invalid("resources", "values must be non-negative and within limits")
		}
	}
	for _, c := range r.Requires {
		if !c.Known() {
			return invalid("requires", "unknown capability %q", c)
		}
	}
	if e := checkStringMap("env", r.Env, MaxEnvEntries); e != nil {
		return e
	}
	if e := checkStringMap("secrets", r.Secrets, MaxEnvEntries); e != nil {
		return e
	}
	if e := checkStringMap("metadata", r.Metadata, MaxMetadataEntries); e != nil {
		return e
	}
	if len(r.IdempotencyKey) > 256 {
		return invalid("idempotency_key", "longer than 256 bytes")
	}
	if len(r.Owner) > 256 {
		return invalid("owner", "longer than 256 bytes")
	}
	if r.SealedSecrets != nil {
		if len(r.Secrets) > 0 {
			return invalid("sealed_secrets", "give secrets or sealed_secrets, not both")
		}
		if e := r.SealedSecrets.Validate(); e != nil {
			return e
		}
	}
	if e := checkPortSpecs(r.Ports); e != nil {
		return e
	}
	if e := r.validateDurable(); e != nil {
		return e
	}
	return checkID("sandbox_id", r.SandboxID, false)
}

// Validate checks the shape of a sealed box (not that it opens).
func (b *SealedBox) Validate() *Error {
	if !validXKey(b.Recipient) {
		return invalid("sealed_secrets.recipient", "not a public xkey")
	}
	if !validXKey(b.Sender) {
		return invalid("sealed_secrets.sender", "not a public xkey")
	}
	if b.Data == "" || len(b.Data) > MaxRequestBytes {
		return invalid("sealed_secrets.data", "empty or too large")
	}
	return nil
}

// validXKey checks the shape of a public xkey: 56 characters of upper-case
// base32 starting with X (the checksum is checked when it is opened).
func validXKey(s string) bool {
	if len(s) != 56 || s[0] != 'X' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Validate checks an attach request.
func (r *AttachRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, true); e != nil {
		return e
	}
	return checkID("nonce", r.Nonce, true)
}

// Validate accepts the empty quota request.
func (r *QuotaRequest) Validate() *Error { return nil }

// checkObjectName checks a files.get/files.put object name:
// <tenant>/<sandbox>/<id>, each part valid (ownership is the router's check).
func checkObjectName(name, sandbox string) *Error {
	if name == "" {
		return missing("name")
	}
	var parts []string
	start := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '/' {
			parts = append(parts, name[start:i])
			start = i + 1
		}
	}
	if len(parts) != 3 || !ValidTenant(parts[0]) || parts[1] != sandbox || !ValidID(parts[2]) {
		return invalid("name", "must be <tenant>/<sandbox_id>/<id> of this sandbox")
	}
	return nil
}

// Validate checks a files.get request.
func (r *FilesGetRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPart(r.Part); e != nil {
		return e
	}
	return checkObjectName(r.Name, r.SandboxID)
}

// Validate checks a files.put request.
func (r *FilesPutRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPart(r.Part); e != nil {
		return e
	}
	if len(r.Data) > MaxInlineFileBytes/3*4+8 {
		return Errorf(CodePayloadTooLarge, "a part holds at most %d bytes", MaxInlineFileBytes).With("limit", MaxInlineFileBytes)
	}
	return checkObjectName(r.Name, r.SandboxID)
}

// Validate checks an exec request.
func (r *ExecRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, false); e != nil {
		return e
	}
	if len(r.Cmd) == 0 || r.Cmd[0] == "" {
		return missing("cmd")
	}
	n := 0
	for _, a := range r.Cmd {
		n += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("cmd", "arguments may not contain NUL")
		}
	}
	if n > MaxArgvBytes {
		return Errorf(CodePayloadTooLarge, "cmd is %d bytes; the limit is %d", n, MaxArgvBytes).With("field", "cmd")
	}
	if e := checkTimeoutMS(r.TimeoutMS); e != nil {
		return e
	}
	if r.OutputLimit < 0 {
		return invalid("output_limit", "%d is out of range 0..%d", r.OutputLimit, MaxOutputLimit)
	}
	if r.OutputLimit > MaxOutputLimit {
		return Errorf(CodeOutputLimitTooLarge, "output_limit %d is above %d", r.OutputLimit, MaxOutputLimit).
			With("field", "output_limit").With("limit", MaxOutputLimit)
	}
	if r.Rows < 0 || r.Rows > MaxWindow {
		return invalid("rows", "rows %d is not 0..%d", r.Rows, MaxWindow)
	}
	if r.Cols < 0 || r.Cols > MaxWindow {
		return invalid("cols", "cols %d is not 0..%d", r.Cols, MaxWindow)
	}
	if r.KeepStdinOpen && !r.Stream {
		return invalid("keep_stdin_open", "only a streamed exec can keep stdin open")
	}
	if r.OutputTail && r.Stream {
		return invalid("output_tail", "only a buffered exec keeps its output's tail (a streamed exec stores it all up to output_limit)")
	}
	if _, err := r.StdinBytes(); err != nil {
		return invalid("stdin", "%s", err.Error())
	}
	return checkStringMap("env", r.Env, MaxEnvEntries)
}

// Validate checks a run_code request.
func (r *RunCodeRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("context_id", r.ContextID, false); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, false); e != nil {
		return e
	}
	if e := checkLanguage(r.Language); e != nil {
		return e
	}
	if r.Code == "" {
		return missing("code")
	}
	return checkTimeoutMS(r.TimeoutMS)
}

// checkTimeoutMS bounds a timeout_ms by MaxTimeoutMS: the caller learns at
// once, and no bound downstream overflows a time.Duration.
func checkTimeoutMS(ms int64) *Error {
	if ms < 0 || ms > MaxTimeoutMS {
		return invalid("timeout_ms", "%d is out of range 0..%d", ms, MaxTimeoutMS)
	}
	return nil
}

// checkPart bounds a part number of a file in the object store.
func checkPart(part int) *Error {
	if part < 0 || part >= MaxFileParts {
		return invalid("part", "%d is out of range 0..%d", part, MaxFileParts-1)
	}
	return nil
}

// checkLanguage bounds a run_code or code_context language name: backends
// quote it back in their errors and pass it to the interpreter they start.
func checkLanguage(l string) *Error {
	if len(l) > 32 {
		return invalid("language", "must be at most 32 bytes")
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("+#._-", c) >= 0) {
			return invalid("language", "must be letters, digits and + # . _ -")
		}
	}
	return nil
}

func checkPath(p string) *Error {
	if p == "" {
		return missing("path")
	}
	if strings.IndexByte(p, 0) >= 0 || len(p) > 4096 {
		return invalid("path", "must be at most 4096 bytes without NUL")
	}
	return nil
}

// Validate checks a files.write request.
func (r *FilesWriteRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkPath(r.Path); e != nil {
		return e
	}
	if r.Data != "" && r.Ref != nil {
		return invalid("data", "give data or ref, not both")
	}
	if r.Mode > MaxFileMode {
		return invalid("mode", "%#o is above %#o", r.Mode, MaxFileMode)
	}
	if r.Ref != nil {
		if r.Ref.Parts < 0 || r.Ref.Parts > MaxFileParts {
			return invalid("ref.parts", "%d is out of range 0..%d", r.Ref.Parts, MaxFileParts)
		}
		if r.Ref.Size < 0 || r.Ref.Size > int64(MaxFileParts)*MaxInlineFileBytes {
			return invalid("ref.size", "%d is out of range 0..%d", r.Ref.Size, int64(MaxFileParts)*MaxInlineFileBytes)
		}
	}
	return nil
}

// Validate checks a files.read request.
func (r *FilesReadRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	return checkPath(r.Path)
}

// Validate checks a files.list request.
func (r *FilesListRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	return checkPath(r.Path)
}

// Signals accepted by the signal op.
var Signals = []string{"KILL", "TERM", "INT", "HUP", "QUIT", "USR1", "USR2"}

// Validate checks a signal request.
func (r *SignalRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, true); e != nil {
		return e
	}
	for _, s := range Signals {
		if r.Signal == s {
			return nil
		}
	}
	return invalid("signal", "%q is not one of %s", r.Signal, strings.Join(Signals, ", "))
}

// Validate checks a stdin request.
func (r *StdinRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("process_id", r.ProcessID, true); e != nil {
		return e
	}
	if _, err := r.DataBytes(); err != nil {
		return invalid("data", "%s", err.Error())
	}
	return nil
}

// Validate checks a kill request.
func (r *KillRequest) Validate() *Error { return checkID("sandbox_id", r.SandboxID, true) }

// Validate checks a get request.
func (r *GetRequest) Validate() *Error { return checkID("sandbox_id", r.SandboxID, true) }

// Validate checks a list request.
func (r *ListRequest) Validate() *Error {
	if e := checkID("backend", r.Backend, false); e != nil {
		return e
	}
	switch r.State {
	case "", StateCreating, StateRunning, StateGone, StateLost, StatePaused:
	default:
		return invalid("state", "%q is not a state", r.State)
	}
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return invalid("limit", "%d is out of range 0..%d", r.Limit, MaxListLimit)
	}
	return checkStringMap("metadata", r.Metadata, MaxMetadataEntries)
}

// Validate checks a set_timeout request.
func (r *SetTimeoutRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if r.TimeoutS == 0 {
		return Errorf(CodeLifetimeRequired, "timeout_s is required").With("field", "timeout_s")
	}
	if r.TimeoutS < 0 || r.TimeoutS > MaxLifetimeSeconds {
		return invalid("timeout_s", "%d is out of range 1..%d", r.TimeoutS, MaxLifetimeSeconds)
	}
	return nil
}

// Validate accepts the empty backends request.
func (r *BackendsRequest) Validate() *Error { return nil }

// Request is what every client request implements.
type Request interface {
	Validate() *Error
}

// SandboxTarget returns the sandbox an op addresses, for the router's
// forwarding; ok is false for ops that address none.
func SandboxTarget(req any) (string, bool) {
	switch r := req.(type) {
	case *ExecRequest:
		return r.SandboxID, true
	case *RunCodeRequest:
		return r.SandboxID, true
	case *FilesWriteRequest:
		return r.SandboxID, true
	case *FilesReadRequest:
		return r.SandboxID, true
	case *FilesReadCommand:
		return r.SandboxID, true
	case *FilesListRequest:
		return r.SandboxID, true
	case *SignalRequest:
		return r.SandboxID, true
	case *StdinRequest:
		return r.SandboxID, true
	case *KillRequest:
		return r.SandboxID, true
	case *SetTimeoutRequest:
		return r.SandboxID, true
	case *ResizeRequest:
		return r.SandboxID, true
	case *FilesWatchRequest:
		return r.SandboxID, true
	case *CodeContextRequest:
		return r.SandboxID, true
	case *PortsExposeRequest:
		return r.SandboxID, true
	case *PortsListRequest:
		return r.SandboxID, true
	case *PortsUnexposeRequest:
		return r.SandboxID, true
	case *PortsTokenRequest:
		return r.SandboxID, true
	case *PauseRequest:
		return r.SandboxID, true
	case *SnapshotRequest:
		return r.SandboxID, true
	}
	return "", false
}

// NewRequest returns a zero request of an op, ready for Decode.
func NewRequest(op string) (Request, bool) {
	switch op {
	case OpCreate:
		return &CreateRequest{}, true
	case OpExec:
		return &ExecRequest{}, true
	case OpRunCode:
		return &RunCodeRequest{}, true
	case OpFilesWrite:
		return &FilesWriteRequest{}, true
	case OpFilesRead:
		return &FilesReadRequest{}, true
	case OpFilesList:
		return &FilesListRequest{}, true
	case OpSignal:
		return &SignalRequest{}, true
	case OpStdin:
		return &StdinRequest{}, true
	case OpKill:
		return &KillRequest{}, true
	case OpGet:
		return &GetRequest{}, true
	case OpList:
		return &ListRequest{}, true
	case OpSetTimeout:
		return &SetTimeoutRequest{}, true
	case OpBackends:
		return &BackendsRequest{}, true
	case OpAttach:
		return &AttachRequest{}, true
	case OpQuota:
		return &QuotaRequest{}, true
	case OpFilesGet:
		return &FilesGetRequest{}, true
	case OpFilesPut:
		return &FilesPutRequest{}, true
	case OpResize:
		return &ResizeRequest{}, true
	case OpCodeContext:
		return &CodeContextRequest{}, true
	case OpFilesWatch:
		return &FilesWatchRequest{}, true
	case OpPortsExpose:
		return &PortsExposeRequest{}, true
	case OpPortsList:
		return &PortsListRequest{}, true
	case OpPortsUnexpose:
		return &PortsUnexposeRequest{}, true
	case OpPortsToken:
		return &PortsTokenRequest{}, true
	case OpPause:
		return &PauseRequest{}, true
	case OpResume:
		return &ResumeRequest{}, true
	case OpSnapshot:
		return &SnapshotRequest{}, true
	case OpSnapshotsList:
		return &SnapshotsListRequest{}, true
	case OpSnapshotsDelete:
		return &SnapshotsDeleteRequest{}, true
	}
	return nil, false
}

// Ops lists every API op of this version.
var Ops = []string{OpCreate, OpExec, OpRunCode, OpFilesWrite, OpFilesRead, OpFilesList, OpSignal, OpStdin, OpKill, OpGet, OpList, OpSetTimeout, OpBackends,
	OpAttach, OpQuota, OpFilesGet, OpFilesPut, OpResize, OpCodeContext, OpFilesWatch,
	OpPortsExpose, OpPortsList, OpPortsUnexpose, OpPortsToken,
	OpPause, OpResume, OpSnapshot, OpSnapshotsList, OpSnapshotsDelete}
