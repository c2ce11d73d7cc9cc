package router

import "github.com/sandboxio/sandboxio/pkg/events"

// An operation that may have run is never answered "retryable":
// a client that retries on retryable would run it twice. Once a command is
// published, an answer that does not come from its worker's result (the
// router's timer, a lost or restarted worker, the router stopping, a
// publication never confirmed) leaves its outcome unknown. For an op that
// is not safe to send again, the answer keeps its code but says retryable
// false, with details.outcome "unknown". Ops safe to repeat (reads, kill,
// set_timeout) and create (whose sandbox the router kills when it gives up
// on it) keep the catalog's retryable. A worker's own answers (SBX_E1306, SBX_E1620 at its
// shutdown) are relayed as the worker sent them.

// repeatable ops are safe to send again whatever became of the first one.
var repeatable = map[string]bool{
	events.OpCreate: true, events.OpGet: true, events.OpList: true, events.OpKill: true, events.OpSetTimeout: true,
	events.OpFilesRead: true, events.OpFilesList: true, events.OpFilesWatch: true, events.OpFilesGet: true,
	events.OpBackends: true, events.OpQuota: true, events.OpAttach: true,
	events.OpPortsList: true, events.OpPortsUnexpose: true,
}

// outcomeUnknown is e for a dispatched command of op whose outcome is
// unknown: not retryable unless op is safe to repeat.
func outcomeUnknown(op string, e *events.Error) *events.Error {
	if e == nil || !e.Retryable || repeatable[op] {
		return e
	}
	e = e.With("outcome", "unknown")
	e.Retryable = false
	return e
}
