package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/pkg/natstrace"
)

func TestOpIDs(t *testing.T) {
	ctx := natstrace.ContextWithTraceparent(context.Background(), OpTraceparent("op1"), "")
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID() != OpTraceID("op1") || sc.SpanID() != OpSpanID("op1") || !sc.IsSampled() {
		t.Fatalf("OpTraceparent round trip: %v", sc)
	}
	if OpSpanID("op1") == OpSpanID("op2") {
		t.Fatal("span ids collide")
	}
	tid, sid := IDGenerator{}.NewIDs(WithIDs(context.Background(), OpTraceID("x"), OpSpanID("x")))
	if tid != OpTraceID("x") || sid != OpSpanID("x") {
		t.Fatal("IDGenerator ignored the context ids")
	}
	if tid, _ := (IDGenerator{}).NewIDs(context.Background()); !tid.IsValid() {
		t.Fatal("random ids invalid")
	}
}

func TestSpanExporterFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
		err  bool
	}{
		{"nothing set", nil, false, false},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, false},
		{"unsupported", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED"} {
				t.Setenv(k, tt.env[k])
			}
			exp, err := SpanExporterFromEnv(context.Background())
			if (err != nil) != tt.err || (exp != nil) != tt.want {
				t.Fatalf("exporter %v, err %v", exp, err)
			}
			if exp != nil {
				_ = exp.Shutdown(context.Background())
			}
		})
	}
	p, err := Setup(context.Background(), Config{ServiceName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Exporting {
		t.Error("exporting with no exporter configured")
	}
	_ = p.Shutdown(context.Background())
}
