package auditor

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/natstrace"
)

const scope = "github.com/sandboxio/sandboxio/services/auditor"

// renderer turns written records into spans and metrics. Only allow-listed
// record fields become span attributes or metric labels: never the summary,
// metadata, error message or anything else free-form.
type renderer struct {
	tracer trace.Tracer
	// spans is whether spans leave the process (an exporter is set):
	// without one, a span rendered is recorded and dropped, ≈ 4 % of the
	// allocations of an auditor under bench exec, so only the metrics are
	// kept.
	spans    bool
	ops      metric.Int64Counter
	duration metric.Float64Histogram
	streamed metric.Int64Counter
	records  metric.Int64Counter
	maxAge   time.Duration // an open span older than this is dropped
	maxSpans int           // at most this many open spans; the oldest is dropped
	mu       sync.Mutex
	open     map[string]*list.Element // op id -> element of order
	order    *list.List               // of *openSpan, oldest first
	live     map[string]liveSandbox   // registry view for the live gauge
	attrMu   sync.Mutex
	attrSets map[attrKey]metric.MeasurementOption // see attrs
}

// openSpan is an operation opened and not yet closed here.
type openSpan struct {
	opID string
	span trace.Span
	at   time.Time
}

type liveSandbox struct {
	backend string
	state   events.State
}

func newRenderer(tel *telemetry.Providers, maxAge time.Duration, maxSpans int) (*renderer, error) {
	m := tel.Meter.Meter(scope)
	r := &renderer{tracer: tel.Tracer.Tracer(scope), spans: tel.Exporting, maxAge: maxAge, maxSpans: max(maxSpans, 1),
		open: make(map[string]*list.Element), order: list.New(), live: make(map[string]liveSandbox)}
	var err error
	if r.ops, err = m.Int64Counter("sandboxio.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Operations closed, by kind, backend and outcome.")); err != nil {
		return nil, err
	}
	if r.duration, err = m.Float64Histogram("sandboxio.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of closed operations, by kind, backend and outcome."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)); err != nil {
		return nil, err
	}
	if r.streamed, err = m.Int64Counter("sandboxio.streamed", metric.WithUnit("By"),
		metric.WithDescription("Bytes moved by operations (direction in: to the sandbox, out: from it), by kind and backend.")); err != nil {
		return nil, err
	}
	if r.records, err = m.Int64Counter("sandboxio.audit.records", metric.WithUnit("{record}"),
		metric.WithDescription("Operation records handled by this auditor: written, duplicate (already in the log) or invalid.")); err != nil {
		return nil, err
	}
	_, err = m.Int64ObservableGauge("sandboxio.sandboxes.live", metric.WithUnit("{sandbox}"),
		metric.WithDescription("Sandboxes creating or running, by backend and state, from the registry."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			type k struct {
				b string
				s events.State
			}
			n := map[k]int64{}
			for _, sb := range r.live {
				n[k{sb.backend, sb.state}]++
			}
			for key, v := range n {
				o.Observe(v, metric.WithAttributes(attribute.String("backend", key.b), attribute.String("state", string(key.s))))
			}
			return nil
		}))
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *renderer) countRecord(result string) {
	// A count with no call behind it: no context to carry.
	r.records.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

func spanAttrs(rec events.OpRecord, e Entry) []attribute.KeyValue {
	a := []attribute.KeyValue{
		attribute.String("sandboxio.op_id", rec.OpID),
		attribute.String("sandboxio.kind", rec.Kind),
		attribute.String("sandboxio.sandbox_id", rec.SandboxID),
		attribute.String("sandboxio.backend", rec.Backend),
		attribute.String("sandboxio.worker", rec.Worker),
		attribute.Int64("sandboxio.audit.seq", int64(e.Seq)),
	}
	if rec.ProcessID != "" {
		a = append(a, attribute.String("sandboxio.process_id", rec.ProcessID))
	}
	return a
}

// render emits the span and metrics of one newly written record.
func (r *renderer) render(rec events.OpRecord, e Entry, traceparent, tracestate string) {
	if rec.OpID == "" {
		return
	}
	if !r.spans {
		if rec.Phase == events.EventClosed {
			r.measure(rec)
		}
		return
	}
	if rec.Traceparent != "" {
		traceparent, tracestate = rec.Traceparent, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepLocked()
	switch rec.Phase {
	case events.EventOpened:
		if _, ok := r.open[rec.OpID]; ok {
			return
		}
		for r.order.Len() >= r.maxSpans {
			r.dropLocked(r.order.Front())
		}
		r.open[rec.OpID] = r.order.PushBack(&openSpan{opID: rec.OpID, span: r.start(rec, e, traceparent, tracestate), at: time.Now()})
	case events.EventClosed:
		var span trace.Span
		if el, ok := r.open[rec.OpID]; ok {
			span = el.Value.(*openSpan).span
			r.dropLocked(el)
		} else {
			// The opened record went to another instance, or its span was
			// dropped here: the closed record alone gives the complete span
			// (it starts at the record's StartedAt).
			span = r.start(rec, e, traceparent, tracestate)
		}
		r.finish(span, rec, e)
		r.measure(rec)
	}
}

// dropLocked forgets an open span without ending it, so it is not exported.
func (r *renderer) dropLocked(el *list.Element) {
	delete(r.open, el.Value.(*openSpan).opID)
	r.order.Remove(el)
}

func (r *renderer) start(rec events.OpRecord, e Entry, traceparent, tracestate string) trace.Span {
	// A record's span descends from the trace in its headers, not from a caller.
	ctx := natstrace.ContextWithTraceparent(context.Background(), traceparent, tracestate)
	ctx = telemetry.WithIDs(ctx, telemetry.OpTraceID(rec.OpID), telemetry.OpSpanID(rec.OpID))
	start := rec.StartedAt
	if start.IsZero() {
		start = e.Time
	}
	_, span := r.tracer.Start(ctx, "sandboxio."+rec.Kind, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(spanAttrs(rec, e)...))
	return span
}

func (r *renderer) finish(span trace.Span, rec events.OpRecord, e Entry) {
	a := []attribute.KeyValue{
		attribute.String("sandboxio.outcome", rec.Outcome),
		attribute.Int64("sandboxio.audit.seq_closed", int64(e.Seq)),
		attribute.Int64("sandboxio.bytes_in", rec.BytesIn),
		attribute.Int64("sandboxio.bytes_out", rec.BytesOut),
	}
	if rec.ErrorCode != "" {
		a = append(a, attribute.String("sandboxio.error_code", string(rec.ErrorCode)))
	}
	if rec.ExitCode != nil {
		a = append(a, attribute.Int("sandboxio.exit_code", *rec.ExitCode))
	}
	span.SetAttributes(a...)
	if rec.Outcome == events.OutcomeError {
		span.SetStatus(codes.Error, string(rec.ErrorCode)) // the code only: messages may quote user data
	} else {
		span.SetStatus(codes.Ok, "")
	}
	end := e.Time
	if rec.EndedAt != nil {
		end = *rec.EndedAt
	}
	span.End(trace.WithTimestamp(end))
}

func (r *renderer) measure(rec events.OpRecord) {
	// Measurements of a record: no call behind them, no context to carry.
	ctx := context.Background()
	outcome := rec.Outcome
	if outcome == "" {
		outcome = "unknown"
	}
	byOutcome := r.attrs(rec.Kind, rec.Backend, "outcome", outcome)
	r.ops.Add(ctx, 1, byOutcome)
	d := float64(rec.DurationMS) / 1000
	if rec.DurationMS == 0 && rec.EndedAt != nil && !rec.StartedAt.IsZero() {
		d = rec.EndedAt.Sub(rec.StartedAt).Seconds()
	}
	r.duration.Record(ctx, d, byOutcome)
	if rec.BytesIn > 0 {
		r.streamed.Add(ctx, rec.BytesIn, r.attrs(rec.Kind, rec.Backend, "direction", "in"))
	}
	if rec.BytesOut > 0 {
		r.streamed.Add(ctx, rec.BytesOut, r.attrs(rec.Kind, rec.Backend, "direction", "out"))
	}
}

// attrKey names one attribute set of the operation metrics.
type attrKey struct{ kind, backend, key, value string }

// maxAttrSets bounds the attribute sets the renderer keeps (kinds, backends
// and outcomes are few; a record naming ever new backends gets its set
// built each time rather than growing the cache).
const maxAttrSets = 512

// attrs is the measurement option of kind, backend and key=value, built
// once: an attribute set sorts and copies its attributes, three times a
// closed record otherwise.
func (r *renderer) attrs(kind, backend, key, value string) metric.MeasurementOption {
	k := attrKey{kind, backend, key, value}
	r.attrMu.Lock()
	defer r.attrMu.Unlock()
	if o, ok := r.attrSets[k]; ok {
		return o
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", kind), attribute.String("backend", backend), attribute.String(key, value)))
	if r.attrSets == nil {
		r.attrSets = make(map[attrKey]metric.MeasurementOption)
	}
	if len(r.attrSets) < maxAttrSets {
		r.attrSets[k] = o
	}
	return o
}

// sweepLocked drops the spans opened more than maxAge ago whose operation
// has not closed here: they are never ended, so never exported. Spans are
// kept oldest first, so this looks only at the ones it drops and one more.
func (r *renderer) sweepLocked() {
	now := time.Now()
	for el := r.order.Front(); el != nil && now.Sub(el.Value.(*openSpan).at) > r.maxAge; el = r.order.Front() {
		r.dropLocked(el)
	}
}

// openSpans is the number of operations opened and not yet closed here.
func (r *renderer) openSpans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// watchRegistry keeps the live-sandbox view for the gauge until ctx ends.
func (r *renderer) watchRegistry(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	open := func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, events.BucketRegistry) }
	keepWatching(ctx, log, "registry watch", open, func(ctx context.Context, kv jetstream.KeyValue) error {
		return followKV(ctx, kv, ">", func() {}, r.applyRegistry)
	})
}

func (r *renderer) applyRegistry(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.live, e.Key())
		return
	}
	var sb events.Sandbox
	if json.Unmarshal(e.Value(), &sb) == nil && !sb.State.Ended() && sb.State != "" {
		r.live[e.Key()] = liveSandbox{backend: sb.Backend, state: sb.State}
	} else {
		delete(r.live, e.Key())
	}
}

// keepWatching opens a bucket and follows it until ctx ends, opening it
// again (after a pause) whenever it is missing or its watch ends.
func keepWatching(ctx context.Context, log *slog.Logger, what string, open func(context.Context) (jetstream.KeyValue, error),
	follow func(context.Context, jetstream.KeyValue) error) {
	for ctx.Err() == nil {
		kv, err := open(ctx)
		if err == nil {
			err = follow(ctx, kv)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Debug(what, slog.Any("err", err))
		}
		sleepCtx(ctx, 2*time.Second)
	}
}

// followKV watches the keys of kv matching filter until ctx ends (nil) or
// the watch closes (an error): ready runs at the end of the initial values,
// apply for every entry after.
func followKV(ctx context.Context, kv jetstream.KeyValue, filter string, ready func(), apply func(jetstream.KeyValueEntry)) error {
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil {
				ready()
				continue
			}
			apply(e)
		}
	}
}
