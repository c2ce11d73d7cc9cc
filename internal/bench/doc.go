// Package bench measures a running sandboxio deployment from outside, as a
// client sees it: `sandboxio bench` (cmd/sandboxio/cli/bench.go).
//
// Every scenario measures the floor of the same server in the same run
// beside the system: a micro PING round trip to the router ($SRV.PING) and
// a bare request/reply to a responder bench starts on a connection of its
// own. Latencies are interleaved operation by operation with the floor's,
// so that the ratio holds on a busy machine where the absolute figures do
// not.
//
// Scenarios:
//   - exec: sequential non-streamed exec latency, then throughput with
//     Clients concurrent callers over Conns connections;
//   - create: create, first exec done, kill — time to interactive, per class;
//   - stream: streamed output in MB/s, every chunk's sequence checked;
//   - live: populations of live sandboxes, and at each the latency of
//     create, exec, list and kill.
//
// Every measurement is bounded by a count and a duration. The package uses
// nats.go and pkg/client only; it imports no service.
package bench
