// Package natstrace carries W3C trace context on NATS message headers: an
// OpenTelemetry TextMapCarrier over nats.Header with case-insensitive reads
// and lowercase writes: the trace context every sandboxio message carries
// (its traceparent header), for clients, workers and services alike. It
// depends only on the OpenTelemetry API and nats.go, so the Go client SDK
// can use it without the SDK's exporters.
package natstrace
