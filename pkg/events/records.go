package events

import "time"

// State is a sandbox's state in the registry.
type State string

// The states. creating -> running -> gone, or lost when its worker's lease
// expired while it lived.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateGone     State = "gone"
	StateLost     State = "lost"
)

// TierFor is the tier a sandbox of runtime gets on this worker; ok is false
// when the worker does not offer that runtime.
func (l WorkerLease) TierFor(runtime string) (IsolationTier, bool) {
	if runtime == "" {
		return l.Isolation, true
	}
	t, ok := l.Runtimes[runtime]
	return t, ok
}

// Ended reports whether the sandbox no longer exists.
func (s State) Ended() bool { return s == StateGone || s == StateLost }

// Sandbox is the registry record of a sandbox (KV sbx_registry, key =
// sandbox id), and the reply of get and list.
type Sandbox struct {
	SandboxID    string        `json:"sandbox_id"`
	Backend      string        `json:"backend"`
	Worker       string        `json:"worker"`
	Class        string        `json:"class"`
	State        State         `json:"state"`
	Isolation    IsolationTier `json:"isolation"`
	Capabilities Capabilities  `json:"capabilities"`
	Image        string        `json:"image,omitempty"`
	Owner        string        `json:"owner,omitempty"`
	// Tenant is the subject token of the sandbox's tenant: the NATS account
	// the server authenticated the creator as, or TenantOpen.
	Tenant    string            `json:"tenant,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Deadline  time.Time         `json:"deadline"`
	EndedAt   *time.Time        `json:"ended_at,omitempty"`
	EndReason string            `json:"end_reason,omitempty"`
	// HasSecrets says the sandbox was created with secrets, whose values a
	// restarted worker must recover (or withhold from records).
	HasSecrets bool `json:"has_secrets,omitempty"`
	// CreateOp is the operation id of the create, for idempotent redelivery.
	CreateOp string `json:"create_op,omitempty"`
	// SpecHash identifies the create's spec (CreateCommand.SpecHash): a
	// create of the same id with the same hash is a retry (ADR 37).
	SpecHash string `json:"spec_hash,omitempty"`
	// StartedAt is when the sandbox became running; absent on a record
	// whose create never finished.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// Network is the network policy in effect (normalised by the backend).
	Network *NetworkPolicy `json:"network,omitempty"`
	// ExecPath says how the backend runs processes and file operations in
	// the sandbox, for backends with more than one way: ExecPathAgent or
	// ExecPathDockerExec (the fallback, with the reason in ExecPathNote).
	ExecPath     string `json:"exec_path,omitempty"`
	ExecPathNote string `json:"exec_path_note,omitempty"`
	// Usage is what the sandbox has used of its worker's shared limits,
	// kept here so that a worker restarted under the same id goes on
	// counting instead of starting from zero.
	Usage *SandboxUsage `json:"usage,omitempty"`
	// Ports are the ports the sandbox publishes through the gateway
	// (ports.expose), kept by the router with revision-checked updates.
	Ports []PortExposure `json:"ports,omitempty"`
	// Durable is the sandbox's durability (on_deadline, auto_resume) and,
	// while it is paused, the snapshot it resumes from (durable.go).
	Durable *DurableState `json:"durable,omitempty"`
}

// SandboxUsage is a sandbox's use of the limits its operations share.
type SandboxUsage struct {
	// OutputBytes is the output its streamed processes put into SBX_OUT
	// (its share: SBX_E1706).
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// Objects are the bytes its files.read replies stored in sbx_files,
	// at most one entry per hour, each with the time of its latest object;
	// they count for the bucket's TTL (SBX_E1704).
	Objects []ObjectUsage `json:"objects,omitempty"`
}

// ObjectUsage is the bytes stored up to At.
type ObjectUsage struct {
	At    time.Time `json:"at"`
	Bytes int64     `json:"bytes"`
}

// The exec paths of Sandbox.ExecPath.
const (
	ExecPathAgent      = "agent"
	ExecPathDockerExec = "docker-exec"
)

// WorkerLease is a worker's heartbeat record (KV sbx_workers, key
// <backend>.<worker>), refreshed well within the bucket's TTL.
type WorkerLease struct {
	Backend   string        `json:"backend"`
	Worker    string        `json:"worker"`
	Host      string        `json:"host,omitempty"`
	Isolation IsolationTier `json:"isolation"`
	// Runtimes maps each runtime a class may name (ClassSpec.Runtime) to
	// its tier, for backends with several; Isolation is the default's.
	Runtimes        map[string]IsolationTier `json:"runtimes,omitempty"`
	Capabilities    Capabilities             `json:"capabilities"`
	Capacity        int                      `json:"capacity"`
	Load            int                      `json:"load"`
	Version         string                   `json:"version"`
	ProtocolVersion int                      `json:"protocol_version"`
	StartedAt       time.Time                `json:"started_at"`
	HeartbeatAt     time.Time                `json:"heartbeat_at"`
	// AnswersRestarted says that after a same-id restart this worker itself
	// answers the buffered execs its predecessor left waiting: with their
	// result when it re-attached to the process, else SBX_E1621
	// ProcessLost (ADR 18). A router then leaves them to it.
	AnswersRestarted bool `json:"answers_restarted,omitempty"`
	// SealKey is the public xkey (X…) secrets for this backend are sealed to.
	SealKey string `json:"seal_key,omitempty"`
	// SigningKey is the public nkey (U…) this worker signs its records with.
	SigningKey string `json:"signing_key,omitempty"`
	// ExecPath is how the worker's new sandboxes run execs, for backends
	// with more than one way (docker: "agent" or "docker-exec").
	ExecPath string `json:"exec_path,omitempty"`
}

// ClassSpec is what the router resolved from a class or dsn; it travels in
// the create command so that the worker needs no routing file.
type ClassSpec struct {
	Name             string            `json:"name"`
	Backend          string            `json:"backend"`
	Image            string            `json:"image,omitempty"`    // docker
	Runtime          string            `json:"runtime,omitempty"`  // docker: runc, runsc
	Template         string            `json:"template,omitempty"` // e2b
	RequireIsolation IsolationTier     `json:"require_isolation,omitempty"`
	Resources        *Resources        `json:"resources,omitempty"`
	ReadOnlyRoot     bool              `json:"read_only_root,omitempty"`
	Options          map[string]string `json:"options,omitempty"`
}

// CreateCommand is the data of io.sandboxio.v1.cmd.create.
type CreateCommand struct {
	SandboxID string        `json:"sandbox_id"`
	Spec      ClassSpec     `json:"spec"`
	Request   CreateRequest `json:"request"`
	Deadline  time.Time     `json:"deadline"`
	// Tenant is who the server said the creator is (TenantOpen when not
	// authenticated); the worker checks it is ValidTenant and puts it into
	// every output subject of the sandbox.
	Tenant string `json:"tenant,omitempty"`
	// SpecHash is the router's hash of what the create asks for (its
	// tenant, owner, class spec and request less the id, the idempotency
	// key and the secrets): a later create of the same id with the same
	// hash is a retry of this one (ADR 37). Empty: never a retry.
	SpecHash string `json:"spec_hash,omitempty"`
	// Resume says the command resumes the paused sandbox SandboxID from
	// Request.FromSnapshot (its own snapshot) instead of creating one.
	Resume bool `json:"resume,omitempty"`
}

// Outcomes of an operation record.
const (
	OutcomeOK        = "ok"
	OutcomeError     = "error"
	OutcomeCancelled = "cancelled"
)

// OpRecord is one operation, published to SBX_OPS when it opens and again
// when it closes. The closed record is redacted: it never holds a secret.
type OpRecord struct {
	OpID       string            `json:"op_id"`
	Kind       string            `json:"kind"`  // the op: create, exec, kill, ...
	Phase      string            `json:"phase"` // opened or closed
	SandboxID  string            `json:"sandbox_id"`
	Backend    string            `json:"backend"`
	Worker     string            `json:"worker"`
	ProcessID  string            `json:"process_id,omitempty"`
	Owner      string            `json:"owner,omitempty"`
	StartedAt  time.Time         `json:"started_at"`
	EndedAt    *time.Time        `json:"ended_at,omitempty"`
	DurationMS int64             `json:"duration_ms,omitempty"`
	Outcome    string            `json:"outcome,omitempty"`
	ErrorCode  Code              `json:"error_code,omitempty"`
	Error      string            `json:"error,omitempty"`
	ExitCode   *int              `json:"exit_code,omitempty"`
	BytesIn    int64             `json:"bytes_in,omitempty"`
	BytesOut   int64             `json:"bytes_out,omitempty"`
	Summary    map[string]string `json:"summary,omitempty"` // redacted description: argv, class, path...
	Metadata   map[string]string `json:"metadata,omitempty"`
	// Traceparent is the W3C trace context of the request that caused the
	// operation, so the auditor can render the span in the caller's trace.
	Traceparent string `json:"traceparent,omitempty"`
}
