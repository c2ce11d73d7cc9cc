// Package interpreter is a client for the code-interpreter server that E2B's
// code-interpreter template runs on port 49999: POST /execute with its
// newline-delimited JSON answer (stdout, stderr, rich results, errors), and
// the /contexts API (create, list, restart, delete).
//
// A stream that ends without end_of_execution is reported as
// envd.ErrStreamBroken, and a 502 from the proxy as envd.ErrSandboxGone, so
// callers classify interpreter and envd failures the same way.
package interpreter
