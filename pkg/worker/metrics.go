package worker

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// workerMetrics are the gaps an operator must see under audit policy warn:
// records not yet stored (being retried) and records given up on.
type workerMetrics struct {
	recordsPending metric.Int64UpDownCounter
	recordsRetried metric.Int64Counter
	recordsLost    metric.Int64Counter
}

func newWorkerMetrics(m metric.Meter) (workerMetrics, error) {
	var wm workerMetrics
	var err error
	if wm.recordsPending, err = m.Int64UpDownCounter("sandboxio.worker.records.pending",
		metric.WithDescription("operation records published but not yet stored in SBX_OPS")); err != nil {
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
	ctx := context.Background()
	wm.recordsPending.Add(ctx, 0)
	wm.recordsRetried.Add(ctx, 0)
	wm.recordsLost.Add(ctx, 0)
	return wm, nil
}
