package events

import "strings"

// Stream, bucket and service names.
const (
	StreamCommands = "SBX_CMD" // WorkQueue: commands to workers
	StreamOps      = "SBX_OPS" // Limits: operation records
	StreamOutput   = "SBX_OUT" // Limits: process output and exit markers

	BucketRegistry    = "sbx_registry" // sandbox -> Sandbox
	BucketWorkers     = "sbx_workers"  // <backend>.<worker> -> WorkerLease
	BucketIdempotency = "sbx_idem"     // idempotency hash -> sandbox id
	BucketFiles       = "sbx_files"    // object store for large files
	BucketAudit       = "sbx_audit"    // <log id> -> the auditor's latest signed checkpoint line

	ServiceName = "sandboxio" // the router's NATS micro service
)

// Subject roots and wildcards.
const (
	SubjectRoot       = "sbx"
	SubjectAPIPrefix  = "sbx.api.v1" // sbx.api.v1.<op>
	SubjectCmdAll     = "sbx.cmd.>"  // every command (SBX_CMD)
	SubjectOpsAll     = "sbx.ops.>"  // every operation record (SBX_OPS)
	SubjectOutAll     = "sbx.out.>"  // every output message (SBX_OUT)
	SubjectLiveAll    = "sbx.live.>" // live copy of SBX_OUT
	SubjectOutPrefix  = "sbx.out."   // replaced by SubjectLivePrefix in the live copy
	SubjectLivePrefix = "sbx.live."
	// SubjectCmdBallast carries the router's short-lived ballast messages
	// on SBX_CMD (pkg/bus.RunBallast). It has three tokens, so no
	// command subject (five or more) and no consumer filter matches it.
	SubjectCmdBallast = "sbx.cmd.ballast"
)

// API operations: the last token of sbx.api.v1.<op>.
const (
	OpCreate     = "create"
	OpExec       = "exec"
	OpRunCode    = "run_code"
	OpFilesWrite = "files.write"
	OpFilesRead  = "files.read"
	OpFilesList  = "files.list"
	OpSignal     = "signal"
	OpStdin      = "stdin"
	OpKill       = "kill"
	OpGet        = "get"
	OpList       = "list"
	OpSetTimeout = "set_timeout"
	OpBackends   = "backends"
	OpAttach     = "attach"
	OpQuota      = "quota"
	OpFilesGet   = "files.get"
	OpFilesPut   = "files.put"
)

// SandboxOps are the operations addressed to one existing sandbox; the router
// forwards them to the worker that owns it.
var SandboxOps = []string{OpExec, OpRunCode, OpFilesWrite, OpFilesRead, OpFilesList, OpSignal, OpStdin, OpKill, OpSetTimeout,
	OpResize, OpCodeContext, OpFilesWatch, OpPortsExpose, OpPortsList, OpPortsUnexpose, OpPortsToken,
	OpPause, OpSnapshot}

// APISubject is the request subject of an op: sbx.api.v1.<op>.
func APISubject(op string) string { return SubjectAPIPrefix + "." + op }

// Verb is the command-subject token of an op: "files.write" becomes
// "files_write" so that every verb is exactly one token.
func Verb(op string) string { return strings.ReplaceAll(op, ".", "_") }

// CreateSubject is where creates for a backend's pool go:
// sbx.cmd.<backend>.pool.create.
func CreateSubject(backend string) string { return "sbx.cmd." + backend + ".pool.create" }

// PoolFilter is the pool consumer's filter: sbx.cmd.<backend>.pool.>.
func PoolFilter(backend string) string { return "sbx.cmd." + backend + ".pool.>" }

// NodeSubject addresses one worker: sbx.cmd.<backend>.node.<worker>.<verb>.
func NodeSubject(backend, worker, verb string) string {
	return "sbx.cmd." + backend + ".node." + worker + "." + verb
}

// NodeFilter is a worker's own consumer filter: sbx.cmd.<backend>.node.<worker>.>.
func NodeFilter(backend, worker string) string {
	return "sbx.cmd." + backend + ".node." + worker + ".>"
}

// PoolConsumer and NodeConsumer are the durable consumer names on SBX_CMD.
func PoolConsumer(backend string) string         { return backend + "-pool" }
func NodeConsumer(backend, worker string) string { return backend + "-node-" + worker }

// OpsSubject is where a sandbox's operation records go:
// sbx.ops.<backend>.<sandbox>.<event>.
func OpsSubject(backend, sandbox, event string) string {
	return "sbx.ops." + backend + "." + sandbox + "." + event
}

// Output stream names, the last token of an output subject.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	Exit   = "exit"
)

// OutputSubject is one stream of one process:
// sbx.out.<tenant>.<sandbox>.<process>.<stream>. The tenant token (the
// sandbox's Tenant, TenantOpen when unauthenticated) lets the services
// account export each tenant only its own output (docs/security.md).
func OutputSubject(tenant, sandbox, process, stream string) string {
	return "sbx.out." + tenant + "." + sandbox + "." + process + "." + stream
}

// OutputFilter matches every output message of one process:
// sbx.out.<tenant>.<sandbox>.<process>.>.
func OutputFilter(tenant, sandbox, process string) string {
	return "sbx.out." + tenant + "." + sandbox + "." + process + ".>"
}

// LiveSubject is the core-NATS live copy of an output subject:
// sbx.live.<tenant>.<sandbox>.<process>.<stream>.
func LiveSubject(tenant, sandbox, process, stream string) string {
	return "sbx.live." + tenant + "." + sandbox + "." + process + "." + stream
}

// LiveFilter matches the live copy of every stream of one process.
func LiveFilter(tenant, sandbox, process string) string {
	return "sbx.live." + tenant + "." + sandbox + "." + process + ".>"
}

// ProgressSubject carries human-readable progress of a create (an image
// being pulled, a VM booting) on core NATS: sbx.progress.<tenant>.<sandbox>.
// Best effort: nothing is stored; a client subscribes before it sends the
// create.
func ProgressSubject(tenant, sandbox string) string {
	return "sbx.progress." + tenant + "." + sandbox
}

// ReplaySubject is where the router replays stored output for an attach:
// sbx.replay.<tenant>.<nonce>.
func ReplaySubject(tenant, nonce string) string { return "sbx.replay." + tenant + "." + nonce }

// WorkerKey is a worker's key in the sbx_workers bucket: <backend>.<worker>.
func WorkerKey(backend, worker string) string { return backend + "." + worker }

// ParseOutputSubject splits sbx.out.<tenant>.<sandbox>.<process>.<stream>
// (or its sbx.live. copy).
func ParseOutputSubject(subject string) (tenant, sandbox, process, stream string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 6 || parts[0] != "sbx" || (parts[1] != "out" && parts[1] != "live") {
		return "", "", "", "", false
	}
	return parts[2], parts[3], parts[4], parts[5], true
}
