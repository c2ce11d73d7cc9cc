// Package bus declares the JetStream streams, key-value buckets and object
// store of the bus (their names and subjects come from pkg/events) and
// creates them idempotently. Every service calls Ensure at start-up, so the
// all-in-one and split deployments see the same configuration.
package bus
