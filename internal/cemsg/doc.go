// Package cemsg encodes and decodes CloudEvents in binary mode on NATS
// messages: every attribute in a lowercase ce-* header, the data in the body.
// The envelope is built and validated with the CloudEvents sdk-go event type;
// the NATS side is ours so that JetStream acks, de-duplication and trace
// headers stay under our control (see docs/dependencies.md).
package cemsg
