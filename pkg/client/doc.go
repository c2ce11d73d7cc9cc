// Package client is the Go SDK of sandboxio: sandbox handles over the
// protocol v1 subjects (sbx.api.v1.<op>), streamed output, files of any
// size and sealed secrets.
//
// Create returns a *Sandbox, a handle on which everything else is a
// method: Exec (buffered), Shell, Stream (output as it is written),
// RunCode, Files (Write, Read, List, Remove; files larger than one request
// move in parts through the object store inside the handle), SetTimeout,
// Info and Kill. Time is a time.Duration everywhere (WithLifetime,
// Timeout); client.Sandbox(id) is a handle on a sandbox made elsewhere.
// The id-based calls the handle uses (Client.Exec, Client.WriteFile…) stay
// for those who want them. The Example functions are runnable recipes for
// the common tasks (go test runs them against an embedded system).
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
// catalog's sentinels (events.ErrExecutionTimeout, events.ErrFileNotFound,
// events.ErrSandboxGone, the family events.ErrSandboxTimeout...);
// Retryable says whether the catalog allows the same call again. A
// cancelled context comes back as context.Canceled (or
// context.DeadlineExceeded), never as an SBX code, and the remote work it
// started is killed within the teardown grace (SBX_TEARDOWN_GRACE, default
// 5 s); if the kill cannot be confirmed in that time the client logs an
// orphaned-sandbox warning naming the id, and the sandbox's lifetime and
// the reaper are the backstop.
package client
