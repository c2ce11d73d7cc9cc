package client

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Attach to a process that does not exist would follow nothing forever:
// no output is stored for it and none will come. checkAttachable asks, only
// when nothing is stored, whether the process runs, with an empty,
// harmless stdin write (answered ProcessNotFound for an unknown process,
// OK or InvalidValue for a running one), and checks the store once more
// before it answers: the process may have run to its end meanwhile.
func (c *Client) checkAttachable(ctx context.Context, sandboxID, processID string, stored func(context.Context) bool) error {
	if stored(ctx) {
		return nil
	}
	err := c.SendStdin(ctx, sandboxID, processID, nil, false)
	switch {
	case errors.Is(err, events.ErrProcessNotFound):
		if stored(ctx) {
			return nil
		}
		return events.Errorf(events.CodeProcessNotFound, "no process %s in sandbox %s: none runs and no output of it is stored", processID, sandboxID).
			With("sandbox_id", sandboxID).With("process_id", processID)
	case errors.Is(err, events.ErrSandboxGone), errors.Is(err, events.ErrSandboxNotFound), errors.Is(err, events.ErrForbidden):
		if stored(ctx) {
			return nil
		}
		return err
	}
	return nil // running, or no answer now: follow it (the idle check covers a loss)
}

// storedInStream reports whether SBX_OUT holds anything of the process.
func (c *Client) storedInStream(sandboxID, processID string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		s, err := c.js.Stream(ctx, events.StreamOutput)
		if err != nil {
			return true // unknown: do not refuse
		}
		_, err = s.GetLastMsgForSubject(ctx, events.OutputFilter("*", sandboxID, processID))
		return !errors.Is(err, jetstream.ErrMsgNotFound)
	}
}

// storedViaRouter reports whether the router finds anything of the process
// stored (a caller without JetStream): first as the first replay found
// (first), then by asking again with an attach whose replay nobody reads.
// The second look must be a new one: the process may have ended, its exit
// marker stored, between the first replay and the stdin probe.
func (c *Client) storedViaRouter(sandboxID, processID string, first bool) func(context.Context) bool {
	asked := false
	return func(ctx context.Context) bool {
		if !asked {
			asked = true
			return first
		}
		var r events.AttachReply
		err := c.call(ctx, events.OpAttach, events.AttachRequest{SandboxID: sandboxID, ProcessID: processID, Nonce: events.NewID()}, &r)
		return err != nil || r.Stored > 0 // unknown: do not refuse
	}
}
