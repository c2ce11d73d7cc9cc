// Package clustertest runs sandboxio against an in-process three-node
// JetStream cluster (internal/embednats cluster nodes on loopback TCP): the
// router and a fake worker connect with every node's URL, streams and
// buckets have three replicas, and the tests stop and restart nodes to show
// what survives the loss of one.
package clustertest
