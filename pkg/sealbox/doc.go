// Package sealbox seals a create's secrets to a backend's public xkey
// (events.BackendInfo.SealKey) with a one-time sender key, so that they are
// in clear nowhere on the bus: the Go client seals them before a request
// leaves it, the router seals the clear secrets of plain clients, and only a
// worker holding the backend's seed opens them. It is the one
// implementation of the events.SealedBox format in Go.
package sealbox
