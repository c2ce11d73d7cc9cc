// Package dockerworker is the Docker Engine backend of sandboxio: a
// worker.Backend that runs each sandbox as a hardened container (no
// capabilities, no-new-privileges, the default seccomp profile, pids, memory
// and CPU limits, docker-init as PID 1, a non-root user, no network unless
// asked) and each process as an exec in it, over the Engine API (never the
// docker CLI).
//
// It implements worker.Backend and the optional worker.Signaller,
// worker.FileSystem, worker.CodeRunner and worker.Lister. A warm pool per
// class spec keeps pre-created, single-use containers; a per-host semaphore
// bounds concurrent creates and execs. See docs/backends/docker.md.
package dockerworker
