package dockerworker

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// A request the agent failed serving and recovered from is AgentInternal,
// for a file operation and for an exec, and the sandbox is not judged gone.
func TestAgentInternalIsCoded(t *testing.T) {
	pe := &proto.Error{Kind: proto.ErrInternal, Message: "the agent failed serving list (a bug, at files.go:195); it goes on serving"}
	b := &Backend{}
	sb := &sandbox{id: "sb-1"}
	for name, err := range map[string]error{
		"file": fileErr("/work", pe),
		"exec": b.agentFailed(context.Background(), sb, pe),
	} {
		if !errors.Is(err, events.ErrAgentInternal) {
			t.Errorf("%s: %v, want AgentInternal", name, err)
		}
	}
	if sb.gone.Load() {
		t.Error("the sandbox was judged gone")
	}
}
