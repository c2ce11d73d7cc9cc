// Package protocoltest holds black-box tests of protocol v1: they speak to a
// whole sandboxio (pkg/sbxtest over TCP) with nothing but a raw nats.go
// connection and JSON, exactly as docs/protocol.md tells a developer in any
// language to do, and check every reply against the JSON Schemas in
// docs/protocol. It has no non-test code.
package protocoltest
