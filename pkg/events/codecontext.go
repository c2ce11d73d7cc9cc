package events

// OpCodeContext creates, restarts or deletes a stateful code context (a
// backend with stateful_code). run_code with a context_id still creates the
// context on first use; this op is for doing it ahead, starting over, or
// freeing it.
const OpCodeContext = "code_context"

// The actions of code_context.
const (
	// ContextCreate starts the context's interpreter (for a context that
	// exists, nothing: it is idempotent).
	ContextCreate = "create"
	// ContextRestart starts a fresh interpreter in place of the context's:
	// its state is lost, its id stays.
	ContextRestart = "restart"
	// ContextDelete ends the context's interpreter and forgets the id.
	ContextDelete = "delete"
)

// CodeContextRequest is sbx.api.v1.code_context.
type CodeContextRequest struct {
	SandboxID string `json:"sandbox_id"`
	ContextID string `json:"context_id"`
	Action    string `json:"action"`
	// Language is create's (default python).
	Language string `json:"language,omitempty"`
}

// CodeContextReply answers code_context.
type CodeContextReply struct {
	ContextID string `json:"context_id"`
	Action    string `json:"action"`
}

// Validate checks a code_context request.
func (r *CodeContextRequest) Validate() *Error {
	if e := checkID("sandbox_id", r.SandboxID, true); e != nil {
		return e
	}
	if e := checkID("context_id", r.ContextID, true); e != nil {
		return e
	}
	if e := checkLanguage(r.Language); e != nil {
		return e
	}
	switch r.Action {
	case ContextCreate:
	case ContextRestart, ContextDelete:
		if r.Language != "" {
			return invalid("language", "only create takes a language")
		}
	case "":
		return missing("action")
	default:
		return invalid("action", "action %q is not create, restart or delete", r.Action)
	}
	return nil
}
