// Package router is the client-facing API of sandboxio: a NATS micro service
// named "sandboxio" on sbx.api.v1.<op>. It validates each request, resolves
// the class (routing file) or dsn, checks isolation and capabilities against
// the live workers' leases, and publishes the command as a CloudEvent to
// SBX_CMD: creates to the backend's pool, everything else to the worker that
// owns the sandbox (from the sbx_registry bucket). Workers answer on a
// per-router reply subject; the router relays the answer, or a coded error
// when the worker does not answer in time or its lease expires.
//
// Handlers never wait on the bus: a request is handed to JetStream
// asynchronously and answered when the worker's reply arrives, so one slow
// sandbox never holds up the others (the micro pitfall of
// reference/nats-patterns.md §3).
package router
