package client

import (
	"context"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Resize changes the window size of a process started with tty.
func (c *Client) Resize(ctx context.Context, sandboxID, processID string, rows, cols int) error {
	return c.call(ctx, events.OpResize, events.ResizeRequest{SandboxID: sandboxID, ProcessID: processID, Rows: rows, Cols: cols}, nil)
}
