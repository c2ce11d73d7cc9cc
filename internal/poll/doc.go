// Package poll waits for a condition with a deadline: the one way the
// project's tests (and the failover runs) wait for something to become
// true, instead of sleeping to synchronise.
package poll
