// Package client is the Go SDK of sandboxio: typed calls over the protocol
// v1 subjects (sbx.api.v1.<op>), streamed output, files and sealed secrets.
//
// Connect takes the credentials an operator gave you (WithCreds, WithNKey,
// WithUserInfo, WithToken, WithTLS, or the SBX_NATS_* variables) and fails
// at once, naming them, when the server refuses them; New wraps a
// connection you made. The client then asks the quota op who the server
// says you are (Tenant): a tenant has no JetStream, so it follows output
// on its live subjects and has the router replay what is stored (attach),
// merged by Sbx-Seq, and moves large files in parts (files.get, files.put).
// Without a tenant (an open deployment, the services account) output is
// read from SBX_OUT with an ordered consumer. Secrets given to Create are
// sealed to the backend's public xkey before they leave the process.
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
