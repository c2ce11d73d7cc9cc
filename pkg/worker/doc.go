// Package worker is what every sandbox backend worker shares: the Backend
// interface a backend implements, and the runtime (Worker) that connects a
// backend to the bus. The runtime pulls creates from the backend's pool
// consumer on SBX_CMD, claims each sandbox in the sbx_registry KV bucket,
// consumes its own per-worker consumer for the commands of the sandboxes it
// owns, advertises tier and capabilities in a lease in sbx_workers, streams
// process output to SBX_OUT with per-stream sequences, caps and
// backpressure, enforces exec timeouts and sandbox deadlines, and publishes an
// operation record for every operation to SBX_OPS.
//
// A third party writes a backend by implementing Backend (and any of the
// optional interfaces) and passing it to New; workertest checks it.
package worker
