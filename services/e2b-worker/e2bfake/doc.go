// Package e2bfake is a protocol-faithful fake of E2B for tests: the control
// plane REST API and, per sandbox, envd (Connect process and filesystem
// services, /files, /health, /envs) and the code interpreter's /execute
// NDJSON stream, served on 127.0.0.1 by two httptest servers.
//
// Sandboxes live in memory and expire at their timeout. Each one has a
// temporary directory that stands for its root file system: sandbox paths
// such as /home/user/x map to <dir>/home/user/x. Processes are real child
// processes run inside that tree (internal/fakejail: a private mount
// namespace with the host's system directories bound read-only, then a
// chroot), so they and the files API see the same files at the same paths,
// with envd's PATH and the envd user's HOME. As root, a process of envd
// user "user" runs as uid 1000 and files the API writes for it are its own;
// in an unprivileged user namespace everything is root; on a host without
// namespaces processes run on the host's paths with their working
// directory mapped into the tree (fakejail.Detect tells which).
//
// Requests are validated against the reference protocol (routing headers,
// content types, JSON field names and types, SDK conventions); deviations are
// recorded, see Deviations and FailOnDeviation. Faults can be injected per
// server or per sandbox at run time with SetFaults and SetSandboxFaults, and
// a sandbox can be expired at any moment with ExpireSandbox.
//
// Wire-level behaviour follows the recorded envd 0.6.13 transcripts in
// shared/reference/e2b-envd-transcripts; replay_test.go checks it.
package e2bfake
