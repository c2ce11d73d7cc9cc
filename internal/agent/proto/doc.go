// Package proto is the wire protocol between the docker worker and sbx-agent,
// the static helper it injects into every sandbox: length-bounded binary
// frames multiplexing many streams over one byte stream (a container attach,
// a unix socket, later a vsock), with per-stream credit windows for
// backpressure and per-stream sequence numbers on everything the agent sends.
//
// Everything the agent says is hostile input to the worker: ReadFrame bounds
// every frame before it allocates, and the message types have Validate
// methods that bound every field. The decoder is fuzzed (FuzzReadFrame,
// FuzzResult).
package proto
