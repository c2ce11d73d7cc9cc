// Package modalapi is sandboxio's own client of Modal's gRPC wire protocol:
// the control plane (modal.client.ModalClient) and the worker-side command
// router (modal.task_command_router.TaskCommandRouter), over the stubs in
// internal/gen.
//
// It behaves as Modal's SDKs do on the wire: credentials from MODAL_* and
// the profile file (ConfigFromEnv), the x-modal-* headers, an auth token
// from AuthTokenGet on every unary call, retries with one idempotency key
// per logical call, server-directed throttling (an RPCRetryPolicy in the
// status details), router JWTs refreshed on UNAUTHENTICATED and stdio read
// by byte offset so that a broken stream resumes without loss or
// duplication. Tokens and JWTs are never logged.
package modalapi
