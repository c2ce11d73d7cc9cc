// Package bus declares the JetStream streams, key-value buckets and object
// store of the bus (their names and subjects come from pkg/events) and
// creates them idempotently. Every service calls Ensure at start-up, so the
// all-in-one and split deployments see the same configuration. Ensure
// reads each stream's configuration first and creates or updates only what
// is missing or differs, so that services whose users may not update
// streams (SBX_OPS) start on a bus the operator set up. SBX_OPS denies
// message delete and purge: the audit trail cannot be rewritten through
// the JetStream API.
package bus
