// Package embednats runs a nats-server with JetStream inside the process:
// the single server of `sandboxio dev` and of tests, and a node of a
// JetStream cluster (Config.ClusterName, Routes) for `sandboxio nats-server`
// and for in-process cluster tests (test/clustertest).
package embednats
