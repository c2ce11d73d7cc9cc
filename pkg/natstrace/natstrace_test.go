package natstrace

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

func TestCarrier(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		h := nats.Header{name: {tp}}
		sc := trace.SpanContextFromContext(Extract(context.Background(), h))
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: not extracted", name)
		}
		out := nats.Header{"Traceparent": {"stale"}}
		Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), out)
		if got := out["traceparent"]; len(got) != 1 || got[0] != tp || len(out["Traceparent"]) != 0 {
			t.Errorf("%s: injected %v", name, out)
		}
	}
}
