// Package modalworker is the Modal backend of sandboxio: a worker.Backend
// that runs each sandbox as a Modal Sandbox (a gVisor container on Modal's
// cloud, isolation tier gvisor) through Modal's gRPC API — the control
// plane for apps, images, secrets and sandboxes, and the task's
// TaskCommandRouter for processes — with our own client (internal/modalapi)
// of the wire protocol (proto/modal_proto, stubs in internal/gen).
//
// It implements worker.Backend, worker.FileSystem (through the
// modal-sandbox-fs-tools exec Modal puts in every sandbox),
// worker.TimeoutSetter (which refuses: Modal cannot change a sandbox's
// lifetime, so a sandbox is created with its full lifetime) and
// worker.Lister (by the sandboxio.worker tag). Signals other than KILL are
// not offered: Modal has no signal RPC. Secrets become an ephemeral Modal
// Secret and never appear in tags, logs or errors; Modal tokens and router
// JWTs are never logged. See docs/backends/modal.md.
//
// modalfake is a protocol-faithful fake Modal for tests.
package modalworker

//go:generate ./proto/generate.sh
