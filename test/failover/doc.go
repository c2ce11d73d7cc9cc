// Package failover is the fault harness behind `make failover`: it runs
// the real `sandboxio` binary (built once, in TestMain) as separate
// processes — nats-server nodes, routers, workers, auditor, reaper, or
// `dev` — puts them under a client load, kills or restarts one of them
// with SIGKILL or SIGTERM, and prints what the callers and the system saw:
// requests, errors by SBX code (and answers with no code), sandboxes and
// containers left, operations acknowledged to a client without their
// records in the audit log or with doubled records, and the time to
// recover.
//
// The partition scenario cuts a worker off in a network namespace of its
// own (a veth pair on a private /30, taken down) when it runs as root with
// iproute2, and through a TCP proxy otherwise (or with
// SBX_FAILOVER_CUT=proxy); it prints which.
//
// Every scenario is bounded in time. The cheapest (TestFailoverRouterRestarts,
// one NATS node and the fake backend) runs in every `go test`, so in `make
// check`; the others run only with SBX_FAILOVER=1 (`make failover`), the
// Docker ones only where a Docker daemon answers. Processes and containers
// are named and labelled by a per-run id, network namespaces and veth pairs
// by the test's pid (sbxfo-<pid>-<n>); nothing else is touched.
package failover
