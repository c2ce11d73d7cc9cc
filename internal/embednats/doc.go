// Package embednats runs a nats-server with JetStream inside the process, for
// `sandboxio dev` and for tests.
package embednats
