package worker

import (
	"context"
	"time"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// ContextRequest is one code_context: create, restart or delete a stateful
// code context.
type ContextRequest struct {
	// Action is events.ContextCreate, ContextRestart or ContextDelete.
	Action    string
	ContextID string
	// Language is create's ("" for python).
	Language string
}

// CodeContexts manages a backend's stateful code contexts ahead of, or
// apart from, run_code (which creates a context on first use). Restart and
// delete of a context the sandbox does not have are events.CodeContextNotFound;
// create of one it has does nothing.
type CodeContexts interface {
	CodeContext(ctx context.Context, sandboxID string, req ContextRequest) error
}

// contextOpTimeout bounds a code_context (a create starts an interpreter).
const contextOpTimeout = time.Minute

// handleCodeContext runs a code_context through the backend's CodeContexts,
// recorded like the other operations that change a sandbox.
func (w *Worker) handleCodeContext(sb *sandbox, env cemsg.Envelope, r *events.CodeContextRequest) (any, *events.Error) {
	cc, ok := w.backend.(CodeContexts)
	if !ok || !w.info.Capabilities.Has(events.CapStatefulCode) {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s has no stateful code contexts", w.info.Name).
			With("capability", string(events.CapStatefulCode))
	}
	summary := map[string]string{"action": r.Action, "context_id": r.ContextID}
	return w.recorded(sb, env, events.OpCodeContext, summary, func(*opRecord) (any, *events.Error) {
		ctx, cancel := context.WithTimeout(detached(), contextOpTimeout)
		defer cancel()
		if err := cc.CodeContext(ctx, sb.id, ContextRequest{Action: r.Action, ContextID: r.ContextID, Language: r.Language}); err != nil {
			return nil, classify(err)
		}
		return events.CodeContextReply{ContextID: r.ContextID, Action: r.Action}, nil
	})
}
