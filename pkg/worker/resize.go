package worker

import (
	"context"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// handleResize changes a PTY's window size through the backend's Resizer.
func (w *Worker) handleResize(sb *sandbox, r *events.ResizeRequest) (any, *events.Error) {
	sb.mu.Lock()
	p := sb.procs[r.ProcessID]
	sb.mu.Unlock()
	if p == nil {
		return nil, events.Errorf(events.CodeProcessNotFound, "no running process %s in sandbox %s", r.ProcessID, sb.id)
	}
	rs, ok := w.backend.(Resizer)
	if !ok {
		return nil, events.Errorf(events.CodeCapabilityNotSupp, "backend %s has no terminals", w.info.Name)
	}
	ctx, cancel := context.WithTimeout(detached(), 10*time.Second)
	defer cancel()
	if err := rs.Resize(ctx, sb.id, r.ProcessID, r.Rows, r.Cols); err != nil {
		return nil, classify(err)
	}
	return events.OKReply{OK: true}, nil
}
