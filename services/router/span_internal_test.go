package router

import (
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

// TestStartSpanWithoutTracing: with the no-op tracer (nothing exports
// spans) a command carries the caller's traceparent as it came and the
// router builds no span attributes or headers for it (14 allocations a
// command before).
func TestStartSpanWithoutTracing(t *testing.T) {
	s := &Service{tracer: noop.NewTracerProvider().Tracer("t")}
	for _, tp := range []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "", "not a traceparent"} {
		span, got := s.startSpan("exec", "op", "sb", tp)
		if got != tp {
			t.Errorf("traceparent %q became %q", tp, got)
		}
		endSpan(span, "SBX_E1302")
	}
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if n := testing.AllocsPerRun(100, func() { span, _ := s.startSpan("exec", "op", "sb", tp); endSpan(span, "") }); n > 0 {
		t.Fatalf("%v allocations a command", n)
	}
}
