// Package client is the Go SDK of sandboxio: typed calls over the protocol
// v1 subjects (sbx.api.v1.<op>) and streamed output read from SBX_OUT.
//
// Errors are *events.Error values classified with errors.Is against the
// events sentinels (events.ErrExecutionTimeout, events.ErrSandboxGone, the
// family events.ErrSandboxTimeout...). A cancelled context comes back as
// context.Canceled (or context.DeadlineExceeded), never as an SBX code, and
// the remote work it started is killed within the teardown grace
// (SBX_TEARDOWN_GRACE, default 5 s); if the kill cannot be confirmed in
// that time the client logs an orphaned-sandbox warning naming the id, and
// the sandbox's lifetime and the reaper are the backstop.
package client
