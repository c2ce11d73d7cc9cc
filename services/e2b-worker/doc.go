// Package e2bworker is the E2B backend of sandboxio: a worker.Backend that
// runs each sandbox as an E2B sandbox (a Firecracker microVM, isolation tier
// microvm) through E2B's control-plane REST API, and each process through
// envd, the daemon inside the sandbox (Connect RPC), without a shell around
// the argv.
//
// It implements worker.Backend and the optional worker.Signaller (TERM and
// KILL, all envd can deliver), worker.FileSystem (/files and ListDir),
// worker.CodeRunner (the code interpreter's /execute stream, with stateful
// contexts), worker.TimeoutSetter (E2B's lifetime follows set_timeout) and
// worker.Lister (by the io.sandboxio.worker metadata key).
//
// Network policy: deny is allow_internet_access false; allow with no list is
// allow_internet_access true; an allowlist is network.allowOut with
// network.denyOut [0.0.0.0/0]. Secrets are passed as envVars and never
// appear in metadata, logs or errors. See docs/backends/e2b.md.
//
// The protocol clients live in internal/e2bapi, internal/envd and
// internal/interpreter; e2bfake is a protocol-faithful fake E2B for tests.
package e2bworker
