// Package integration holds end-to-end tests of sandboxio's promises that
// span services: redaction of operation records (a canary secret found
// nowhere), one trace from client through router to worker, no audit record
// lost across auditor and NATS restarts, the audit policy, and no container
// left behind when clients, workers and routers die (real Docker, build tag
// integration).
package integration
