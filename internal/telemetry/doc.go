// Package telemetry is sandboxio's shared OpenTelemetry plumbing: a
// TextMapCarrier over nats.Header (case-insensitive Get, lowercase Set, so a
// traceparent written by any language's client is found), the deterministic
// trace and span ids of an operation (derived from its op id, so that any
// service can name the span the auditor renders for an operation), and
// tracer and meter providers configured from the standard OTEL_* environment
// variables with a Prometheus exporter for metrics.
package telemetry
