package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestExitFor: each kind of failure has its exit code (GNU timeout's 124,
// docker's 125–127, 69 for an unreachable sandboxio, 2 for usage).
func TestExitFor(t *testing.T) {
	wire := func(e *events.Error) error { // as decoded from a reply
		var back events.ErrorBody
		if err := json.Unmarshal(events.EncodeError(e), &back); err != nil {
			t.Fatal(err)
		}
		return back.Error
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"exec timeout", events.Errorf(events.CodeExecutionTimeout, "p ran too long"), exitTimeout},
		{"create timeout", events.Errorf(events.CodeCreateTimeout, "slow"), exitTimeout},
		{"not executable", wire(events.Errorf(events.CodeExecFailed, "permission denied").With("exit_code", 126)), exitNotExecutable},
		{"not found", wire(events.Errorf(events.CodeExecFailed, "no such file").With("exit_code", 127)), exitNotFound},
		{"start failure without a code", events.Errorf(events.CodeExecFailed, "bad cwd"), exitNotFound},
		{"other sbx error", events.Errorf(events.CodeSandboxGone, "gone"), exitSBXError},
		{"no server", fmt.Errorf("%w: nats://x: refused", natsconn.ErrUnreachable), exitUnreachable},
		{"no router", fmt.Errorf("call: %w", nats.ErrNoResponders), exitUnreachable},
		{"usage", usageErr(fmt.Errorf("bad flag")), exitUsage},
		{"a command's own code", exitError{code: 42}, 42},
		{"cancelled", context.Canceled, exitCancelled},
		{"reported sbx error", reported{events.Errorf(events.CodeSandboxNotFound, "x")}, exitSBXError},
	} {
		var buf bytes.Buffer
		if got := exitFor("sbx", &buf, tc.err); got != tc.want {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, got, tc.want, buf.String())
		}
		if _, ok := tc.err.(reported); ok && buf.Len() > 0 {
			t.Errorf("%s: a reported error was printed again: %s", tc.name, buf.String())
		}
	}
}
