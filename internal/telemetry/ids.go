package telemetry

import (
	"context"
	"crypto/sha256"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// OpSpanID is the span id of the span the auditor renders for the operation
// opID. A service that wants its own spans to be children of an operation's
// span sends OpTraceparent(opID) (or uses OpSpanID with its trace id).
func OpSpanID(opID string) trace.SpanID {
	sum := sha256.Sum256([]byte("sandboxio/span/" + opID))
	var id trace.SpanID
	copy(id[:], sum[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// OpTraceID is the trace id of an operation that has no parent trace (a
// reap or lost record, or a record published without traceparent).
func OpTraceID(opID string) trace.TraceID {
	sum := sha256.Sum256([]byte("sandboxio/trace/" + opID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// OpTraceparent is the W3C traceparent naming the span of a root operation
// (one with no parent trace): a command sent on behalf of that operation
// carries it so that the receiver's work shows as a child of it.
func OpTraceparent(opID string) string {
	return fmt.Sprintf("00-%s-%s-01", OpTraceID(opID), OpSpanID(opID))
}

type idsKey struct{}

type fixedIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// WithIDs returns ctx asking an IDGenerator for these ids for the next span
// started with it: the trace id is used only when the span has no parent.
func WithIDs(ctx context.Context, traceID trace.TraceID, spanID trace.SpanID) context.Context {
	return context.WithValue(ctx, idsKey{}, fixedIDs{trace: traceID, span: spanID})
}

// IDGenerator hands out the ids placed in the context by WithIDs, and random
// ids otherwise. Install it with sdktrace.WithIDGenerator.
type IDGenerator struct{}

var _ sdktrace.IDGenerator = IDGenerator{}

// NewIDs returns the trace and span id of a root span.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(idsKey{}).(fixedIDs); ok && f.trace.IsValid() && f.span.IsValid() {
		return f.trace, f.span
	}
	return randomTraceID(), randomSpanID()
}

// NewSpanID returns the span id of a child span.
func (IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if f, ok := ctx.Value(idsKey{}).(fixedIDs); ok && f.span.IsValid() {
		return f.span
	}
	return randomSpanID()
}
