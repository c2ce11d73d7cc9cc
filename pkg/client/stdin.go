package client

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Backoff of a stdin write that the worker refused with Overloaded (the
// process has not read the last writes yet).
const (
	stdinBackoffMin = 5 * time.Millisecond
	stdinBackoffMax = 250 * time.Millisecond
)

// StdinWriter is the flow-controlled stdin of a streamed process started
// with KeepStdinOpen: Write sends the bytes and, while the worker answers
// Overloaded (its queue of unread writes is full: the process reads
// slower than it is fed), waits and sends them again, so a large input
// never stalls or drops on a slow reader. It stops at the first other
// error (the process exited: ProcessNotFound or ProcessExited) or when
// ctx ends. Close ends the process's stdin. Not safe for concurrent use.
type StdinWriter struct {
	c                    *Client
	ctx                  context.Context
	sandboxID, processID string
}

// Stdin returns the flow-controlled stdin of a streamed process.
func (c *Client) Stdin(ctx context.Context, sandboxID, processID string) *StdinWriter {
	return &StdinWriter{c: c, ctx: ctx, sandboxID: sandboxID, processID: processID}
}

// Write sends p, waiting while the process does not keep up.
func (w *StdinWriter) Write(p []byte) (int, error) {
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the process's stdin (it reads EOF after what was sent).
func (w *StdinWriter) Close() error { return w.send(nil, true) }

func (w *StdinWriter) send(p []byte, closeStdin bool) error {
	backoff := stdinBackoffMin
	for {
		err := w.c.SendStdin(w.ctx, w.sandboxID, w.processID, p, closeStdin)
		if !errors.Is(err, events.ErrOverloaded) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return w.ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, stdinBackoffMax)
	}
}
