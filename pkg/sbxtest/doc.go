// Package sbxtest gives a test a whole sandboxio in one call: an embedded
// nats-server with JetStream, the router and a worker running the fake
// backend, a Go client, and the fake's recorded calls. Everything is torn
// down by t.Cleanup.
package sbxtest
