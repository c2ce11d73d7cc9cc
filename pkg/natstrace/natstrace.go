package natstrace

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts a nats.Header to propagation.TextMapCarrier. Get is
// case-insensitive (nats.go header lookups are not, and other languages may
// write Traceparent); Set writes the lowercase name and removes any other
// spelling of it.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, matched case-insensitively.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set stores value under the lowercase key.
func (c HeaderCarrier) Set(key, value string) {
	lk := strings.ToLower(key)
	for k := range c {
		if k != lk && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[lk] = []string{value}
}

// Keys lists the header names, lowercased.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, strings.ToLower(k))
	}
	return keys
}

// Propagator is W3C trace context plus baggage, the propagation sandboxio
// uses on every NATS message.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Inject writes ctx's trace context into h (lowercase traceparent, tracestate).
func Inject(ctx context.Context, h nats.Header) { Propagator.Inject(ctx, HeaderCarrier(h)) }

// Extract returns ctx with the remote trace context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return Propagator.Extract(ctx, HeaderCarrier(h))
}

// ContextWithTraceparent returns ctx with the remote span context of a W3C
// traceparent value; an empty or invalid value leaves ctx unchanged.
func ContextWithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	h := nats.Header{"traceparent": {traceparent}}
	if tracestate != "" {
		h["tracestate"] = []string{tracestate}
	}
	return propagation.TraceContext{}.Extract(ctx, HeaderCarrier(h))
}
