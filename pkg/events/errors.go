package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Code is a stable SBX error code, e.g. "SBX_E1302".
type Code string

// Number is the numeric part of the code, as sent in Nats-Service-Error-Code.
func (c Code) Number() int {
	n, err := strconv.Atoi(strings.TrimPrefix(string(c), "SBX_E"))
	if err != nil {
		return 0
	}
	return n
}

// CodeFromNumber turns the numeric header value back into a Code.
func CodeFromNumber(n int) Code { return Code(fmt.Sprintf("SBX_E%04d", n)) }

// The error codes. Ranges: 10xx request, 11xx routing and placement, 12xx
// sandbox lifecycle, 13xx execution, 14xx auth, tenancy and quota, 15xx audit,
// 16xx backend. A code, once published, keeps its meaning forever.
const (
	CodeInvalidRequest       Code = "SBX_E1001"
	CodeUnknownField         Code = "SBX_E1002"
	CodeMissingField         Code = "SBX_E1003"
	CodeLifetimeRequired     Code = "SBX_E1004"
	CodeInvalidID            Code = "SBX_E1005"
	CodePayloadTooLarge      Code = "SBX_E1006"
	CodeInvalidValue         Code = "SBX_E1007"
	CodeUnknownOp            Code = "SBX_E1008"
	CodeUnknownClass         Code = "SBX_E1101"
	CodeUnknownBackend       Code = "SBX_E1102"
	CodeNoWorker             Code = "SBX_E1103"
	CodeIsolationUnavailable Code = "SBX_E1104"
	CodeCapabilityNotSupp    Code = "SBX_E1105"
	CodeInvalidDSN           Code = "SBX_E1106"
	CodeSandboxNotFound      Code = "SBX_E1201"
	CodeSandboxExists        Code = "SBX_E1202"
	CodeCreateTimeout        Code = "SBX_E1203"
	CodeSandboxGone          Code = "SBX_E1204"
	CodeCreateFailed         Code = "SBX_E1205"
	CodeIdempotencyConflict  Code = "SBX_E1206"
	CodeFileNotFound         Code = "SBX_E1207"
	CodeSandboxPaused        Code = "SBX_E1208"
	CodeSnapshotNotFound     Code = "SBX_E1209"
	CodeSnapshotIncomplete   Code = "SBX_E1210"
	CodeSandboxBusy          Code = "SBX_E1211"
	CodeProcessNotFound      Code = "SBX_E1301"
	CodeExecutionTimeout     Code = "SBX_E1302"
	CodeExecFailed           Code = "SBX_E1303"
	CodeOutputGap            Code = "SBX_E1304"
	CodeProcessExited        Code = "SBX_E1305"
	CodeAgentUnavailable     Code = "SBX_E1306"
	CodeAgentProtocol        Code = "SBX_E1307"
	CodePathIsSymlink        Code = "SBX_E1308"
	CodeContextCrashed       Code = "SBX_E1309"
	CodePTYNotFound          Code = "SBX_E1310"
	CodeAgentInternal        Code = "SBX_E1311"
	CodeWatchLimit           Code = "SBX_E1312"
	CodeContextNotFound      Code = "SBX_E1320"
	CodeUnauthorized         Code = "SBX_E1401"
	CodeForbidden            Code = "SBX_E1402"
	CodeQuotaExceeded        Code = "SBX_E1403"
	CodeRateLimited          Code = "SBX_E1404"
	CodeCommandMismatch      Code = "SBX_E1405"
	CodeStorageQuota         Code = "SBX_E1406"
	CodeSnapshotBytesQuota   Code = "SBX_E1407"
	CodeSnapshotCountQuota   Code = "SBX_E1408"
	CodeAuditUnavailable     Code = "SBX_E1501"
	CodeAuditTampered        Code = "SBX_E1502"
	CodeBackendUnavailable   Code = "SBX_E1601"
	CodeWorkerTimeout        Code = "SBX_E1602"
	CodeBackendError         Code = "SBX_E1603"
	CodeOverloaded           Code = "SBX_E1604"
	CodeImageNotFound        Code = "SBX_E1605"
	CodeWorkerLost           Code = "SBX_E1607"
	CodeCommandExpired       Code = "SBX_E1608"
	CodeInternal             Code = "SBX_E1699"
	// Egress policy (docker-worker, SBX_E1720–1729).
	CodeEgressInvalidEntry     Code = "SBX_E1720"
	CodeEgressTooManyEntries   Code = "SBX_E1721"
	CodeEgressCIDRTooBroad     Code = "SBX_E1722"
	CodeEgressIPv6Unsupported  Code = "SBX_E1723"
	CodeEgressCIDRForbidden    Code = "SBX_E1724"
	CodeEgressSetupFailed      Code = "SBX_E1725"
	CodeEgressSubnetsExhausted Code = "SBX_E1726"
	// Ports (gateway, SBX_E1730–1739).
	CodePortReserved    Code = "SBX_E1730"
	CodePortNotExposed  Code = "SBX_E1731"
	CodePortUnreachable Code = "SBX_E1732"
	CodeTooManyPorts    Code = "SBX_E1733"
	// CodePortLinkUnavailable: this deployment makes no signed links.
	CodePortLinkUnavailable Code = "SBX_E1734"
)

// Worker lifecycle codes (SBX_E1620–1629).
const (
	CodeWorkerShutdown Code = "SBX_E1620"
	CodeProcessLost    Code = "SBX_E1621"
	CodeCreateOrphaned Code = "SBX_E1622"
	CodeReplyLost      Code = "SBX_E1623"
	CodeKillDeferred   Code = "SBX_E1624"
)

// Containment codes (17xx): limits on what one sandbox may use or name.
const (
	CodeDiskQuotaTooLarge   Code = "SBX_E1701"
	CodeFileReadTooLarge    Code = "SBX_E1702"
	CodeFileWriteTooLarge   Code = "SBX_E1703"
	CodeObjectQuotaExceeded Code = "SBX_E1704"
	CodeOutputLimitTooLarge Code = "SBX_E1705"
	CodeOutputShareExceeded Code = "SBX_E1706"
	CodeImageNotAllowed     Code = "SBX_E1707"
	CodeInvalidImageRef     Code = "SBX_E1708"
	CodeSandboxOOMKilled    Code = "SBX_E1709"
)

// CatalogEntry describes one code for callers and for docs/errors.md.
type CatalogEntry struct {
	Code      Code
	Name      string
	Retryable bool
	Meaning   string
	Action    string
}

// Catalog lists every code, in code order. docs/errors.md is generated from
// it and a test keeps the two equal.
var Catalog = []CatalogEntry{
	{CodeInvalidRequest, "InvalidRequest", false, "The request body is not valid JSON or not a JSON object.", "Fix the request; see docs/protocol.md."},
	{CodeUnknownField, "UnknownField", false, "The request has a field this protocol version does not define.", "Remove the field, or check the server's protocol version."},
	{CodeMissingField, "MissingField", false, "A mandatory field is missing or empty.", "Send the field named in details.field."},
	{CodeLifetimeRequired, "LifetimeRequired", false, "A create request has no timeout_s: every sandbox needs a lifetime.", "Send timeout_s (seconds, 1 to the server's maximum)."},
	{CodeInvalidID, "InvalidID", false, "An id has characters outside [a-z0-9_-] or is too long.", "Use the id the server returned; ids never contain '.', '*', '>' or spaces."},
	{CodePayloadTooLarge, "PayloadTooLarge", false, "The request, or a field of it, exceeds a size limit.", "Send less, or use the object store for large files."},
	{CodeInvalidValue, "InvalidValue", false, "A field has a value out of range or of the wrong form.", "Fix the field named in details.field."},
	{CodeUnknownOp, "UnknownOp", false, "The operation is not part of this protocol version.", "Check the subject: sbx.api.v1.<op> (a client sends an unknown op to no responder: nats.ErrNoResponders; workers answer this code to a command type they do not know)."},
	{CodeUnknownClass, "UnknownClass", false, "The sandbox class is not in the routing file.", "Use a class listed by the operator, or a dsn."},
	{CodeUnknownBackend, "UnknownBackend", false, "The dsn or class names a backend this deployment does not know.", "Use docker://, e2b:// or fake:// as the deployment allows."},
	{CodeNoWorker, "NoWorkerAvailable", true, "No live worker serves the backend.", "Retry later; an operator should start a worker for the backend."},
	{CodeIsolationUnavailable, "IsolationUnavailable", false, "No live worker of the backend offers the required isolation tier.", "Lower require_isolation or use a class with a stronger backend."},
	{CodeCapabilityNotSupp, "CapabilityNotSupported", false, "The backend cannot do what was asked (a capability, a network allowlist, an op).", "Use a backend that advertises the capability (see the backends op)."},
	{CodeInvalidDSN, "InvalidDSN", false, "The dsn cannot be parsed.", "Use scheme://target, e.g. docker://sandboxio/python:3.11."},
	{CodeSandboxNotFound, "SandboxNotFound", false, "No sandbox has this id.", "Check the id; records of ended sandboxes are kept for a limited time."},
	{CodeSandboxExists, "SandboxExists", false, "A sandbox with the requested id already exists, made by a create of another spec (or tenant): the same create sent again gets that sandbox instead (ADR 37).", "Choose another sandbox_id, or omit it."},
	{CodeCreateTimeout, "CreateTimeout", true, "The sandbox was not ready within the create time limit (a SandboxTimeout).", "Retry; if it persists the backend is overloaded."},
	{CodeSandboxGone, "SandboxGone", false, "The sandbox's lifetime ended, it was killed, or its worker was lost mid-use.", "Create a new sandbox."},
	{CodeCreateFailed, "CreateFailed", false, "The backend refused or failed to create the sandbox.", "Read the message; check the image or template."},
	{CodeIdempotencyConflict, "IdempotencyConflict", false, "The idempotency key was used before for a different request.", "Use a new key for a new request."},
	{CodeFileNotFound, "FileNotFound", false, "No file or directory at the path in the sandbox (files.read, files.list).", "Check the path; list its directory (files.list) to see what is there."},
	{CodeSandboxPaused, "SandboxPaused", false, "The sandbox is paused: its state is kept in a snapshot and it holds no container, so only resume, kill, get and pause reach it.", "Resume it (the resume op), or create it with auto_resume so that operations resume it first."},
	{CodeSnapshotNotFound, "SnapshotNotFound", false, "No complete snapshot has this id for the caller (never made, deleted, expired, another tenant's, or the sandbox's snapshot is gone).", "Check the id with snapshots.list."},
	{CodeSnapshotIncomplete, "SnapshotIncomplete", false, "The snapshot's stored bytes are incomplete or do not match their checksum (a chunk lost or corrupted); nothing was restored from it and the sandbox it was for was not started.", "Use another snapshot; delete this one. A paused sandbox whose own snapshot is broken cannot be resumed: kill it."},
	{CodeSandboxBusy, "SandboxBusy", true, "The sandbox is being created, paused, resumed or snapshotted by another operation; this one changed nothing.", "Retry once the other operation has finished."},
	{CodeProcessNotFound, "ProcessNotFound", false, "No running process has this id in the sandbox.", "Check the process id; it may have exited."},
	{CodeExecutionTimeout, "ExecutionTimeout", false, "The process ran past its timeout_ms and was killed (a SandboxTimeout).", "Raise timeout_ms or make the command faster."},
	{CodeExecFailed, "ExecFailed", false, "The command could not be started (not found, not executable, bad cwd).", "Fix cmd or cwd."},
	{CodeOutputGap, "OutputGap", false, "Output was lost to the stream's retention before it was read.", "Read sooner, or ask the operator for longer SBX_OUT retention."},
	{CodeProcessExited, "ProcessExited", false, "The process has already exited.", "Nothing to do; read its exit marker."},
	{CodeAgentUnavailable, "AgentUnavailable", true, "The sandbox's in-sandbox agent stopped answering (dead, hung or stopped) while the operation ran; whether the operation took effect is unknown. Later operations on the sandbox go through Docker exec.", "Retry the operation if it is safe to repeat; see the sandbox's record."},
	{CodeAgentProtocol, "AgentProtocolViolation", false, "The sandbox's agent broke the protocol (an oversized or out-of-order frame, more output than granted, a malformed reply): what runs in the sandbox is no longer known, so the sandbox was killed.", "Create a new sandbox; code in the sandbox tampered with its agent."},
	{CodePathIsSymlink, "PathIsSymlink", false, "The files API does not follow a symbolic link at the last component of a path it writes, makes or removes.", "Write to the link's target path itself, or remove the link first."},
	{CodeContextCrashed, "ContextCrashed", false, "The stateful code context's interpreter ended (the code exited it, crashed it or ran it out of memory) or did not start; its state is lost.", "Run again: the next run_code with the same context_id starts a fresh interpreter."},
	{CodePTYNotFound, "PTYNotFound", false, "No running process on a pseudo-terminal has this id in the sandbox (it never had a PTY, or it ended).", "Check the process id; start the process with tty."},
	{CodeAgentInternal, "AgentInternal", false, "The sandbox's agent failed serving this operation (a bug it recovered from); the operation did not complete, and the agent and the sandbox go on.", "Report it with the operation id and the message (it names where the agent failed); other operations are unaffected."},
	{CodeWatchLimit, "WatchLimitReached", false, "files.watch could not get an inotify instance or watch: the sandbox user's inotify limits (the host's fs.inotify.max_user_instances, 128 by default, and max_user_watches) are used up, by what runs in the sandbox (a file watcher, a dev server) or, on a host where sandboxes share a uid, by others.", "Stop watchers in the sandbox or watch later; an operator raises fs.inotify.max_user_instances / max_user_watches, or gives each sandbox a uid of its own (docs/backends/docker.md)."},
	{CodeContextNotFound, "ContextNotFound", false, "The sandbox has no stateful code context with this id to restart or delete (it was never made, or it was deleted).", "Check the context id; create it with code_context create, or run code in it (run_code with a context_id creates it)."},
	{CodeUnauthorized, "Unauthorized", false, "The caller, or the worker's backend credentials, are not authenticated.", "Check credentials."},
	{CodeForbidden, "Forbidden", false, "The caller may not do this.", "Ask an operator for the permission."},
	{CodeQuotaExceeded, "QuotaExceeded", true, "A quota (sandboxes, capacity) is used up.", "Retry after other sandboxes end, or raise the quota."},
	{CodeRateLimited, "RateLimited", true, "The request was rate-limited: by the backend, or by the router because the tenant sent more than its max_requests_per_s (default 200 a second per router, a burst of 5 s of it; details.quota, limit, retry_after_ms). Nothing was done.", "Retry with back-off (after details.retry_after_ms), or ask the operator for a higher rate."},
	{CodeCommandMismatch, "CommandMismatch", false, "A command's ce-type names another operation than its signed subject; it was not run.", "Nothing for a client: a publisher on sbx.cmd.> sent a forged or broken command; find it from the worker's log."},
	{CodeStorageQuota, "StorageQuotaExceeded", false, "What the sandbox or its tenant stores in the bus (files.put parts, files.read objects in sbx_files) would exceed its storage quota (details.quota: max_sandbox_storage_bytes or max_storage_bytes). Parts are deleted when their sandbox ends.", "Store less: end sandboxes whose files are no longer needed, or ask the operator for a larger quota. Retrying as is fails again."},
	{CodeSnapshotBytesQuota, "SnapshotBytesQuotaExceeded", false, "The tenant's snapshots (paused sandboxes' included) would exceed its snapshot bytes quota (details.quota max_snapshot_bytes, limit, usage); the snapshot was not kept, the sandbox goes on as it was.", "Delete snapshots or kill paused sandboxes you no longer need, or ask the operator for a larger quota."},
	{CodeSnapshotCountQuota, "SnapshotCountQuotaExceeded", false, "The tenant already keeps the most snapshots it may (details.quota max_snapshots; a paused sandbox's snapshot counts); nothing was stored.", "Delete snapshots or kill paused sandboxes you no longer need, or ask the operator for a higher limit."},
	{CodeAuditUnavailable, "AuditUnavailable", true, "Under audit policy fail, the operation's record could not be stored in time, so the operation was refused.", "Retry; an operator should check SBX_OPS."},
	{CodeAuditTampered, "AuditTampered", false, "The audit log's hash chain is broken.", "Investigate the line named in details."},
	{CodeBackendUnavailable, "BackendUnavailable", true, "The backend or the bus could not be reached.", "Retry with back-off."},
	{CodeWorkerTimeout, "WorkerTimeout", true, "The worker did not answer within the bound.", "Retry; the worker may be overloaded or gone."},
	{CodeBackendError, "BackendError", false, "The backend failed in a way it did not classify.", "Read the message; report it if it persists."},
	{CodeOverloaded, "Overloaded", true, "The worker is at its concurrency limit.", "Retry with back-off."},
	{CodeImageNotFound, "ImageNotFound", false, "The sandbox image does not exist on the worker's host and cannot be pulled.", "Build it (deploy/images/build.sh) or push it to a reachable registry."},
	{CodeWorkerLost, "WorkerLost", true, "The worker that took the create was lost (its lease expired) before the sandbox was ready; nothing of it is kept.", "Retry with the same sandbox_id and spec: another worker takes the create (ADR 37)."},
	{CodeCommandExpired, "CommandExpired", true, "The command reached a worker after its Sbx-Not-After (the router had already answered the caller), so it was not run.", "Retry; the bus or the workers were slow."},
	{CodeWorkerShutdown, "WorkerShutdown", true, "The worker stopped (SIGTERM, a deploy) while the operation ran or before it started; the sandbox itself survives and is re-adopted by the worker's successor.", "Retry; the command may have run in part before it was stopped."},
	{CodeProcessLost, "ProcessLost", true, "The process's worker restarted while it ran: its output stream ends here and its exit status is unknown.", "Retry if the command is safe to run again; read the sandbox's files for what it did."},
	{CodeCreateOrphaned, "CreateOrphaned", true, "The worker that took the create died before it finished; nothing was created.", "Retry the create, with the same sandbox_id and spec if you chose one (ADR 37)."},
	{CodeReplyLost, "ReplyLost", true, "No answer came and none will: the router or the NATS connection carrying the request was lost while the caller waited (a router or NATS node killed, a reconnect). The Go client re-sends idempotent requests itself within the caller's deadline; an exec or run_code is never re-sent (it may have run; the client kills its process), a create's sandbox is killed.", "Retry; for an exec, only if the command is safe to run again."},
	{CodeKillDeferred, "KillDeferred", true, "The sandbox's worker is lost (its lease ended), so the kill could not reach it; the sandbox is not yet known to be gone. The reaper marks it lost after the lost grace and the janitor removes its container.", "Retry the kill: it succeeds (already gone) once the sandbox is marked lost, or reaches the worker if it comes back."},
	{CodeInternal, "Internal", false, "A bug in sandboxio.", "Report it with the operation id."},
	{CodeDiskQuotaTooLarge, "DiskQuotaTooLarge", false, "resources.disk_mb is above the worker's maximum, or above memory_mb where the disk quota is memory-backed (tmpfs).", "Ask for less disk (details.limit), or more memory on a tmpfs-quota host."},
	{CodeFileReadTooLarge, "FileReadTooLarge", false, "files.read of a file whose size (st_size: sparse files count in full) is above the worker's read limit.", "Read less (split the file inside the sandbox, or compress it) or ask the operator for a higher limit."},
	{CodeFileWriteTooLarge, "FileWriteTooLarge", false, "files.write of more bytes than the worker's write limit.", "Write less, or in parts."},
	{CodeObjectQuotaExceeded, "ObjectQuotaExceeded", false, "The sandbox's files in the object store (files.read replies) would exceed its share of sbx_files.", "Fetch and delete earlier objects, or wait for their TTL."},
	{CodeOutputLimitTooLarge, "OutputLimitTooLarge", false, "exec output_limit is above the worker's maximum.", "Ask for at most details.limit bytes."},
	{CodeOutputShareExceeded, "OutputShareExceeded", false, "The sandbox has used its share of the output stream SBX_OUT, or its tenant has (details.quota max_output_bytes: the output of all the tenant's sandboxes, ended ones' included while the stream holds it; default 1 GiB); further output is dropped (truncated) so that it cannot evict other sandboxes' or tenants' output, and once exit markers took it 64 KiB past the share its streamed execs are refused.", "Write less output, or write it to a file and read that; buffered execs still run. A tenant's ended sandboxes' output is purged, oldest first, to make room for its new output."},
	{CodeImageNotAllowed, "ImageNotAllowed", false, "The image is not on the operator's image allowlist.", "Use a class, or an image on the operator's allowlist (SBX_DOCKER_IMAGES; docs/backends/docker.md names the default one); details.image is the refused image."},
	{CodeInvalidImageRef, "InvalidImageRef", false, "The image reference is not a valid name[:tag][@sha256:digest].", "Fix the image reference."},
	{CodeSandboxOOMKilled, "SandboxOOMKilled", false, "The sandbox ran out of memory and its runtime was killed: the sandbox is gone (gVisor, where one OOM takes the whole sandbox).", "Create a new sandbox with more memory_mb, or use less memory."},
	{CodeEgressInvalidEntry, "EgressInvalidEntry", false, "A network.allow entry is malformed: not a host name, an IP address or a CIDR (the request check, every backend), or, on Docker, not a DNS name of at least two ASCII labels (optionally *.), an IPv4 address or an IPv4 CIDR.", "Fix the entry named in details.entry; write IDNs in punycode."},
	{CodeEgressTooManyEntries, "EgressTooManyEntries", false, "network.allow has more entries than the worker allows.", "List fewer names or CIDRs (details.max)."},
	{CodeEgressCIDRTooBroad, "EgressCIDRTooBroad", false, "A network.allow CIDR is wider than the worker's minimum prefix length.", "List narrower CIDRs, or use egress allow without a list."},
	{CodeEgressIPv6Unsupported, "EgressIPv6Unsupported", false, "A network.allow entry is an IPv6 address or CIDR; sandboxes have no IPv6 route.", "List IPv4 CIDRs or names."},
	{CodeEgressCIDRForbidden, "EgressCIDRForbidden", false, "A network.allow CIDR covers addresses no sandbox may reach (the host, sandbox networks, loopback, multicast, the operator's deny list).", "Remove the entry; ask the operator if the range must be reachable."},
	{CodeEgressSetupFailed, "EgressSetupFailed", true, "The worker could not set up the sandbox's network, host rules, resolver or proxy; nothing was started.", "Retry; an operator should check the worker's log."},
	{CodeEgressSubnetsExhausted, "EgressSubnetsExhausted", true, "Every sandbox subnet of the worker's egress pool is in use.", "Retry after other sandboxes end, or give the worker a larger pool."},
	{CodePortReserved, "PortReserved", false, "The port cannot be published: the sandbox agent's own, or reserved by the operator.", "Serve on another port (details.reserved lists them)."},
	{CodePortNotExposed, "PortNotExposed", false, "The port is not published for this sandbox (the gateway answers 404).", "Publish it first with ports.expose."},
	{CodePortUnreachable, "PortUnreachable", true, "Nothing in the sandbox accepts connections on the published port (the gateway answers 502); nothing was sent to it.", "Start the server in the sandbox on that port, listening on 127.0.0.1 or 0.0.0.0, then retry."},
	{CodeTooManyPorts, "TooManyPorts", false, "The sandbox already publishes the most ports it may.", "Unexpose a port first (details.max)."},
	{CodePortLinkUnavailable, "PortLinkUnavailable", false, "This deployment makes no signed links for browsers: its router has no port link key, or no gateway domain (links work with host routing only); the port itself is published.", "Send the port's token in the X-Sbx-Port-Token header, or ask the operator for --port-link-key-file and --gateway-domain."},
}

var catalogByCode = func() map[Code]CatalogEntry {
	m := make(map[Code]CatalogEntry, len(Catalog))
	for _, e := range Catalog {
		m[e.Code] = e
	}
	return m
}()

// Lookup returns the catalog entry of a code.
func Lookup(c Code) (CatalogEntry, bool) { e, ok := catalogByCode[c]; return e, ok }

// Error is an SBX error. It crosses the wire as {"error": Error} and is
// classified with errors.Is against the sentinels below (which compare codes)
// or errors.As(&*Error).
type Error struct {
	Code      Code           `json:"code"`
	Name      string         `json:"name"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code) + " " + e.Name
	}
	return string(e.Code) + " " + e.Name + ": " + e.Message
}

// Is matches an *Error with the same code, and the family sentinel
// ErrSandboxTimeout for both timeouts.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t == ErrSandboxTimeout {
		return e.Code == CodeExecutionTimeout || e.Code == CodeCreateTimeout
	}
	return t.Code == e.Code
}

// With returns a copy of e with a field of details set.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// Errorf returns a new error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	e := catalogByCode[c]
	if e.Code == "" {
		e = catalogByCode[CodeInternal]
	}
	return &Error{Code: e.Code, Name: e.Name, Message: fmt.Sprintf(format, args...), Retryable: e.Retryable}
}

// AsError classifies any error as an *Error: SBX errors as they are, anything
// else as CodeInternal with its message.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Errorf(CodeInternal, "%s", err.Error())
}

func sentinel(c Code) *Error {
	e := catalogByCode[c]
	return &Error{Code: c, Name: e.Name, Message: e.Meaning, Retryable: e.Retryable}
}

// Sentinels for errors.Is. ErrSandboxTimeout is the family of both timeouts.
var (
	ErrSandboxTimeout = &Error{Code: "SBX_TIMEOUT", Name: "SandboxTimeout", Message: "a sandbox time limit was reached"}

	ErrInvalidRequest         = sentinel(CodeInvalidRequest)
	ErrUnknownField           = sentinel(CodeUnknownField)
	ErrMissingField           = sentinel(CodeMissingField)
	ErrLifetimeRequired       = sentinel(CodeLifetimeRequired)
	ErrInvalidID              = sentinel(CodeInvalidID)
	ErrPayloadTooLarge        = sentinel(CodePayloadTooLarge)
	ErrInvalidValue           = sentinel(CodeInvalidValue)
	ErrUnknownOp              = sentinel(CodeUnknownOp)
	ErrUnknownClass           = sentinel(CodeUnknownClass)
	ErrUnknownBackend         = sentinel(CodeUnknownBackend)
	ErrNoWorker               = sentinel(CodeNoWorker)
	ErrIsolationUnavailable   = sentinel(CodeIsolationUnavailable)
	ErrCapabilityNotSupported = sentinel(CodeCapabilityNotSupp)
	ErrInvalidDSN             = sentinel(CodeInvalidDSN)
	ErrSandboxNotFound        = sentinel(CodeSandboxNotFound)
	ErrSandboxExists          = sentinel(CodeSandboxExists)
	ErrCreateTimeout          = sentinel(CodeCreateTimeout)
	ErrSandboxGone            = sentinel(CodeSandboxGone)
	ErrCreateFailed           = sentinel(CodeCreateFailed)
	ErrIdempotencyConflict    = sentinel(CodeIdempotencyConflict)
	ErrFileNotFound           = sentinel(CodeFileNotFound)
	ErrSandboxPaused          = sentinel(CodeSandboxPaused)
	ErrSnapshotNotFound       = sentinel(CodeSnapshotNotFound)
	ErrSnapshotIncomplete     = sentinel(CodeSnapshotIncomplete)
	ErrSandboxBusy            = sentinel(CodeSandboxBusy)
	ErrSnapshotBytesQuota     = sentinel(CodeSnapshotBytesQuota)
	ErrSnapshotCountQuota     = sentinel(CodeSnapshotCountQuota)
	ErrProcessNotFound        = sentinel(CodeProcessNotFound)
	ErrExecutionTimeout       = sentinel(CodeExecutionTimeout)
	ErrExecFailed             = sentinel(CodeExecFailed)
	ErrOutputGap              = sentinel(CodeOutputGap)
	ErrProcessExited          = sentinel(CodeProcessExited)
	ErrAgentUnavailable       = sentinel(CodeAgentUnavailable)
	ErrAgentProtocol          = sentinel(CodeAgentProtocol)
	ErrPathIsSymlink          = sentinel(CodePathIsSymlink)
	ErrAgentInternal          = sentinel(CodeAgentInternal)
	ErrWatchLimit             = sentinel(CodeWatchLimit)
	ErrContextCrashed         = sentinel(CodeContextCrashed)
	ErrPTYNotFound            = sentinel(CodePTYNotFound)
	ErrContextNotFound        = sentinel(CodeContextNotFound)
	ErrUnauthorized           = sentinel(CodeUnauthorized)
	ErrCommandMismatch        = sentinel(CodeCommandMismatch)
	ErrForbidden              = sentinel(CodeForbidden)
	ErrQuotaExceeded          = sentinel(CodeQuotaExceeded)
	ErrRateLimited            = sentinel(CodeRateLimited)
	ErrStorageQuota           = sentinel(CodeStorageQuota)
	ErrAuditUnavailable       = sentinel(CodeAuditUnavailable)
	ErrAuditTampered          = sentinel(CodeAuditTampered)
	ErrBackendUnavailable     = sentinel(CodeBackendUnavailable)
	ErrWorkerTimeout          = sentinel(CodeWorkerTimeout)
	ErrBackendError           = sentinel(CodeBackendError)
	ErrOverloaded             = sentinel(CodeOverloaded)
	ErrImageNotFound          = sentinel(CodeImageNotFound)
	ErrWorkerLost             = sentinel(CodeWorkerLost)
	ErrCommandExpired         = sentinel(CodeCommandExpired)
	ErrInternal               = sentinel(CodeInternal)

	ErrDiskQuotaTooLarge   = sentinel(CodeDiskQuotaTooLarge)
	ErrFileReadTooLarge    = sentinel(CodeFileReadTooLarge)
	ErrFileWriteTooLarge   = sentinel(CodeFileWriteTooLarge)
	ErrObjectQuotaExceeded = sentinel(CodeObjectQuotaExceeded)
	ErrOutputLimitTooLarge = sentinel(CodeOutputLimitTooLarge)
	ErrOutputShareExceeded = sentinel(CodeOutputShareExceeded)
	ErrImageNotAllowed     = sentinel(CodeImageNotAllowed)
	ErrInvalidImageRef     = sentinel(CodeInvalidImageRef)
	ErrSandboxOOMKilled    = sentinel(CodeSandboxOOMKilled)

	ErrEgressInvalidEntry     = sentinel(CodeEgressInvalidEntry)
	ErrEgressTooManyEntries   = sentinel(CodeEgressTooManyEntries)
	ErrEgressCIDRTooBroad     = sentinel(CodeEgressCIDRTooBroad)
	ErrEgressIPv6Unsupported  = sentinel(CodeEgressIPv6Unsupported)
	ErrEgressCIDRForbidden    = sentinel(CodeEgressCIDRForbidden)
	ErrEgressSetupFailed      = sentinel(CodeEgressSetupFailed)
	ErrEgressSubnetsExhausted = sentinel(CodeEgressSubnetsExhausted)
	ErrPortReserved           = sentinel(CodePortReserved)
	ErrPortNotExposed         = sentinel(CodePortNotExposed)
	ErrPortUnreachable        = sentinel(CodePortUnreachable)
	ErrTooManyPorts           = sentinel(CodeTooManyPorts)
	ErrPortLinkUnavailable    = sentinel(CodePortLinkUnavailable)
)

// Sentinels of the worker lifecycle codes.
var (
	ErrWorkerShutdown = sentinel(CodeWorkerShutdown)
	ErrProcessLost    = sentinel(CodeProcessLost)
	ErrCreateOrphaned = sentinel(CodeCreateOrphaned)
	ErrReplyLost      = sentinel(CodeReplyLost)
	ErrKillDeferred   = sentinel(CodeKillDeferred)
)

// ErrorBody is the JSON body of every failed reply: {"error": {...}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// EncodeError renders the body of a failed reply.
func EncodeError(e *Error) []byte {
	b, err := json.Marshal(ErrorBody{Error: e})
	if err != nil { // Details held something unencodable: drop them.
		c := *e
		c.Details = nil
		b, _ = json.Marshal(ErrorBody{Error: &c})
	}
	return b
}

// DecodeError reads an error body. It returns nil when body holds no error.
func DecodeError(body []byte) *Error {
	var eb ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
		return nil
	}
	return eb.Error
}
