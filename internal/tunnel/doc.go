// Package tunnel carries a TCP connection between a gateway and the worker
// that owns a sandbox, over core NATS (not JetStream): the gateway's Dialer
// opens it with a signed TunnelOpen on the worker's open subject; the
// worker's Server checks it (signature, replay, the registry record through
// its Open hook), dials the port through its backend (the sandbox's agent)
// and pumps bytes both ways.
//
// Each direction is a sequence of frames on a subject only the two ends
// know (random 128-bit ids), within a credit window (DefaultWindow): a slow
// reader makes the other end wait, never either side buffer more than the
// window. A lost frame (a slow consumer's drop) ends the connection instead
// of corrupting it. An end that hears nothing for DeadAfter (its peer's
// process or NATS connection died; pings flow every KeepAlive while
// nothing else does) ends the connection, as does IdleTimeout with no
// bytes either way. Subjects and messages: pkg/events/tunnel.go; design
// and measurements: docs/adr/0050-ports-over-the-agent-channel.md.
package tunnel
