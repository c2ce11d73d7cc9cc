package client

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// LatestProcess returns the id of the sandbox's process that wrote output
// last (what `attach SANDBOX` follows). It reads SBX_OUT, so it needs
// JetStream access to the services account (an open deployment, an
// operator); a tenant gets events.ErrCapabilityNotSupported and must name
// the process. A sandbox with no stored output is events.ErrProcessNotFound.
func (c *Client) LatestProcess(ctx context.Context, sandboxID string) (string, error) {
	if !events.ValidID(sandboxID) {
		return "", events.Errorf(events.CodeInvalidID, "sandbox_id %q is not a valid id", sandboxID).With("field", "sandbox_id")
	}
	if c.session(ctx).api {
		return "", events.Errorf(events.CodeCapabilityNotSupp, "finding a sandbox's latest process needs JetStream access, which a tenant has not: name the process (exec and run print its id)")
	}
	st, err := c.js.Stream(ctx, events.StreamOutput)
	if err != nil {
		return "", events.Errorf(events.CodeBackendUnavailable, "output stream: %v", err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.OutputFilter("*", sandboxID, "*"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", events.Errorf(events.CodeProcessNotFound, "sandbox %s has no stored output of any process", sandboxID)
	}
	if err != nil {
		return "", events.Errorf(events.CodeBackendUnavailable, "output stream: %v", err)
	}
	// sbx.out.<tenant>.<sandbox>.<process>.<stream>
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 6 || parts[3] != sandboxID || !events.ValidID(parts[4]) {
		return "", events.Errorf(events.CodeInternal, "unexpected output subject %q", m.Subject)
	}
	return parts[4], nil
}
