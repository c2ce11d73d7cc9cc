package events

// CloudEvent types. Commands on SBX_CMD carry the op they ask for; records on
// SBX_OPS carry the phase of the operation they describe.
const (
	TypePrefix = "io.sandboxio.v1."

	TypeCmdCreate     = "io.sandboxio.v1.cmd.create"
	TypeCmdExec       = "io.sandboxio.v1.cmd.exec"
	TypeCmdRunCode    = "io.sandboxio.v1.cmd.run_code"
	TypeCmdFilesWrite = "io.sandboxio.v1.cmd.files_write"
	TypeCmdFilesRead  = "io.sandboxio.v1.cmd.files_read"
	TypeCmdFilesList  = "io.sandboxio.v1.cmd.files_list"
	TypeCmdSignal     = "io.sandboxio.v1.cmd.signal"
	TypeCmdStdin      = "io.sandboxio.v1.cmd.stdin"
	TypeCmdKill       = "io.sandboxio.v1.cmd.kill"
	TypeCmdSetTimeout = "io.sandboxio.v1.cmd.set_timeout"

	TypeOpOpened = "io.sandboxio.v1.op.opened"
	TypeOpClosed = "io.sandboxio.v1.op.closed"
)

// CommandType is the CloudEvent type of the command for an op.
func CommandType(op string) string { return TypePrefix + "cmd." + Verb(op) }

// OpFromCommandType is the inverse of CommandType; ok is false for a type that
// is not a command of this version.
func OpFromCommandType(t string) (op string, ok bool) {
	const p = TypePrefix + "cmd."
	if len(t) <= len(p) || t[:len(p)] != p {
		return "", false
	}
	verb := t[len(p):]
	for _, o := range append([]string{OpCreate}, SandboxOps...) {
		if Verb(o) == verb {
			return o, true
		}
	}
	return "", false
}

// Record events: the last token of an SBX_OPS subject.
const (
	EventOpened = "opened"
	EventClosed = "closed"
)
