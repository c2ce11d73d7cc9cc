package client

import (
	"context"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// CodeContext creates, restarts or deletes a stateful code context
// (events.ContextCreate, ContextRestart, ContextDelete) on a backend with
// stateful_code. run_code with a context_id creates one on first use too;
// restart and delete of a context that does not exist are
// events.ErrContextNotFound.
func (c *Client) CodeContext(ctx context.Context, req events.CodeContextRequest) (*events.CodeContextReply, error) {
	var out events.CodeContextReply
	if err := c.call(ctx, events.OpCodeContext, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
