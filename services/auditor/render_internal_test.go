package auditor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestSpansRenderedOnlyWhenExported: without a span exporter the renderer
// keeps no spans (they would be recorded and dropped: ≈ 4 % of an
// auditor's allocations under load) and still counts the operations; with
// one, the opened record's span waits for its closed record.
func TestSpansRenderedOnlyWhenExported(t *testing.T) {
	for _, tc := range []struct {
		name     string
		exporter bool
		wantOpen int
	}{
		{name: "no exporter", exporter: false, wantOpen: 0},
		{name: "exporter", exporter: true, wantOpen: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", "none")
			cfg := telemetry.Config{ServiceName: "test"}
			exp := tracetest.NewInMemoryExporter()
			if tc.exporter {
				cfg.SpanExporter = exp
			}
			tel, err := telemetry.Setup(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			r, err := newRenderer(tel, time.Minute, 16)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now().UTC()
			rec := events.OpRecord{OpID: "op1", Kind: events.OpExec, Phase: events.EventOpened, Backend: "fake", StartedAt: start}
			r.render(rec, Entry{Seq: 1, Time: start}, "", "")
			if n := r.openSpans(); n != tc.wantOpen {
				t.Fatalf("%d spans open after the opened record, want %d", n, tc.wantOpen)
			}
			end := start.Add(time.Millisecond)
			rec.Phase, rec.EndedAt, rec.Outcome = events.EventClosed, &end, events.OutcomeOK
			r.render(rec, Entry{Seq: 2, Time: end}, "", "")
			if n := r.openSpans(); n != 0 {
				t.Fatalf("%d spans open after the closed record", n)
			}
			if err := tel.Tracer.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, want := len(exp.GetSpans()), tc.wantOpen; got != want {
				t.Errorf("%d spans exported, want %d", got, want)
			}
			mfs, err := tel.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			counted := false
			for _, mf := range mfs {
				if mf.GetName() == "sandboxio_operations_total" {
					counted = true
				}
			}
			if !counted {
				t.Error("the closed operation is not counted in sandboxio_operations_total")
			}
		})
	}
}
