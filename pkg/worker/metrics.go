package worker

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// workerMetrics are the gaps an operator must see under audit policy warn:
// records not yet stored (being retried) and records given up on.
type workerMetrics struct {
	recordsRetried metric.Int64Counter
	recordsLost    metric.Int64Counter
}

// newWorkerMetrics registers the worker's metrics; pending is read at each
// collection for the records not yet stored.
func newWorkerMetrics(m metric.Meter, pending func() int64) (workerMetrics, error) {
	var wm workerMetrics
	var err error
	if _, err = m.Int64ObservableUpDownCounter("sandboxio.worker.records.pending",
		metric.WithDescription("operation records handed over for storing (in a batch window, in flight or being retried) and not yet stored in SBX_OPS"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(pending())
			return nil
		})); err != nil {
		return wm, err
	}
	if wm.recordsRetried, err = m.Int64Counter("sandboxio.worker.records.retried",
		metric.WithDescription("operation record publishes retried after a failure or a lost ack")); err != nil {
		return wm, err
	}
	if wm.recordsLost, err = m.Int64Counter("sandboxio.worker.records.lost",
		metric.WithDescription("operation records given up on: never stored (audit gap)")); err != nil {
		return wm, err
	}
	// Exported from the start, so a scrape sees zeros rather than nothing.
	ctx := detached()
	wm.recordsRetried.Add(ctx, 0)
	wm.recordsLost.Add(ctx, 0)
	return wm, nil
}
