package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/auditor"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestOneTrace: a client call made under a span yields, in one trace, the
// client span → the router's span → the worker operation's span (rendered
// by the auditor from the operation records).
func TestOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := sbxtest.Start(t, sbxtest.Options{Logger: testLogger(), Router: func(c *router.Config) { c.TracerProvider = tp }})
	js, err := jetstream.New(env.Conn("inspector"))
	if err != nil {
		t.Fatal(err)
	}
	sink := &spanSink{}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	_, aud := startAuditor(t, env.Conn("auditor"), auditor.Config{LogPath: path, SpanExporter: sink, Logger: testLogger()})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tests := []struct {
		op   string
		call func(ctx context.Context, sandboxID string) error
	}{
		{events.OpExec, func(ctx context.Context, id string) error {
			_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"echo", "hi"}})
			return err
		}},
		{events.OpRunCode, func(ctx context.Context, id string) error {
			_, err := env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: id, Code: "1+1"})
			return err
		}},
		{events.OpKill, func(ctx context.Context, id string) error {
			_, err := env.Client.Kill(ctx, id)
			return err
		}},
	}
	clientSpans := map[string]trace.SpanContext{}
	cctx, span := tp.Tracer("test").Start(ctx, "client create")
	sb, err := env.Client.Create(cctx, events.CreateRequest{TimeoutS: 60})
	span.End()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	clientSpans[events.OpCreate] = span.SpanContext()
	for _, tc := range tests {
		cctx, span := tp.Tracer("test").Start(ctx, "client "+tc.op)
		err := tc.call(cctx, sb.SandboxID)
		span.End()
		if err != nil {
			t.Fatalf("%s: %v", tc.op, err)
		}
		clientSpans[tc.op] = span.SpanContext()
	}
	waitAudited(t, env, js, path, 30*time.Second)
	aud.stop(t) // flushes the auditor's spans

	routerSpans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanKind == trace.SpanKindServer {
			for _, a := range s.Attributes {
				if a.Key == "sandboxio.op" {
					routerSpans[a.Value.AsString()] = s
				}
			}
		}
	}
	opSpans := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range sink.Spans() {
		opSpans[s.SpanContext.SpanID()] = s
	}
	for op, client := range clientSpans {
		t.Run(op, func(t *testing.T) {
			r, ok := routerSpans[op]
			if !ok {
				t.Fatalf("no router span for %s", op)
			}
			if r.SpanContext.TraceID() != client.TraceID() || r.Parent.SpanID() != client.SpanID() {
				t.Errorf("router span %s/%s is not a child of the client span %s/%s",
					r.SpanContext.TraceID(), r.Parent.SpanID(), client.TraceID(), client.SpanID())
			}
			var opID string
			for _, a := range r.Attributes {
				if a.Key == "sandboxio.op_id" {
					opID = a.Value.AsString()
				}
			}
			w, ok := opSpans[telemetry.OpSpanID(opID)]
			if !ok {
				t.Fatalf("the auditor rendered no span for operation %s (%d spans)", opID, len(opSpans))
			}
			if w.Name != "sandboxio."+op {
				t.Errorf("operation span is %q, want sandboxio.%s", w.Name, op)
			}
			if w.SpanContext.TraceID() != client.TraceID() || w.Parent.SpanID() != r.SpanContext.SpanID() {
				t.Errorf("operation span %s/%s is not a child of the router span %s/%s",
					w.SpanContext.TraceID(), w.Parent.SpanID(), r.SpanContext.TraceID(), r.SpanContext.SpanID())
			}
		})
	}
}
