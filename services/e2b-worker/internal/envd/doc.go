// Package envd is a client for E2B's in-sandbox daemon envd: the Connect RPC
// services process.Process and filesystem.Filesystem (proto3 JSON codec over
// HTTP/1.1, as E2B's SDKs speak it), the HTTP endpoints /files and /health,
// and Run, a command helper that streams output and never hangs.
//
// Every request carries the routing headers E2b-Sandbox-Id and
// E2b-Sandbox-Port, the X-Access-Token when the sandbox has one, and the user
// as "Authorization: Basic base64(user:)". Connect-Timeout-Ms, which envd
// treats as the lifetime of a started process, is sent only when the caller
// asks for it (StartRequest.Timeout, RunOptions.Timeout).
//
// Errors: *Error carries the Connect code or HTTP status and matches the
// sentinels (ErrNotFound, ErrAlreadyExists, ...) with errors.Is. A stream that
// ends without an end event or stalls past the keepalive interval is
// classified by probing /health: ErrSandboxGone (502 or unreachable) or the
// retryable ErrStreamBroken.
package envd
