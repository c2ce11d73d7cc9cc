// Package e2bfake is a protocol-faithful fake of E2B for tests: the control
// plane REST API and, per sandbox, envd (Connect process and filesystem
// services, /files, /health, /envs) and the code interpreter's /execute
// NDJSON stream, served on 127.0.0.1 by two httptest servers.
//
// Sandboxes live in memory and expire at their timeout. Each one has a
// temporary directory that stands for its root file system: sandbox paths
// such as /home/user/x map to <dir>/home/user/x. Processes are real child
// processes (os/exec) started in that tree; they see host paths, not sandbox
// paths, and run as the test's own OS user whatever envd user is selected.
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
