package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// consumerCheckBeats is how many heartbeats pass between two checks that
// the worker's consumers still exist (a few seconds: every beat is a third of
// the lease).
const consumerCheckBeats = 3

// Pull settings. nats.go's Consume skips the next pull request when a
// message is handled while the previous pull request is still being sent;
// when that message was the last of its batch nothing else wakes the
// consumer, which stalls until its missed-heartbeat check (two heartbeats,
// a heartbeat being half the pull expiry: 30 s by default). A node consumer
// that pulled one message at a time (a capacity-1 worker) hit that with any
// queued command (TestNodeCommandsDoNotStall; a kill came 30 s late, past
// its Sbx-Not-After). Node commands are acked on receipt and handed off at
// once, so the node consumer pulls at least nodePullMin whatever the
// capacity, and both consumers use a short expiry so that a stall, if one
// still happens, lasts pullExpiry and not 30 s.
//
// The pool consumer (poolPull at a time) showed the same stall in split
// mode while filling to thousands of live sandboxes: no pull request on the
// server, 16 creates pending, creates past their Sbx-Not-After (SBX_E1608)
// every ~35 s; with the 5 s expiry 0 of 3 fills to 6,000 stalled, 2 of 3
// without (docs/benchmarks.md).
const (
	nodePullMin = 64
	nodePullMax = 500
	poolPull    = 4
	pullExpiry  = 5 * time.Second
)

// nodePull is how many node commands the worker pulls at a time.
func (w *Worker) nodePull() int { return min(max(w.cfg.Capacity, nodePullMin), nodePullMax) }

// consumers are the worker's two JetStream consumers on SBX_CMD: the
// backend's shared pool consumer (creates) and the worker's own node
// consumer (every other command). Either can be deleted under a live worker
// (the reaper deletes a lost worker's node consumer once its lease has been
// gone for longer than lease + grace, which a partition can cause); the
// worker notices and creates it again, so that commands reach it again. Only
// Run's goroutine calls start, check and stop.
type consumers struct {
	pool, node jetstream.ConsumeContext
	// lost is signalled (without blocking) by the consume error handler when
	// the server reports a consumer deleted or missing.
	lost chan struct{}
}

func (w *Worker) poolConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       events.PoolConsumer(w.info.Name),
		FilterSubject: events.PoolFilter(w.info.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    poolMaxDeliver,
		MaxAckPending: 10_000,
	}
}

func (w *Worker) nodeConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           events.NodeConsumer(w.info.Name, w.cfg.WorkerID),
		FilterSubject:     events.NodeFilter(w.info.Name, w.cfg.WorkerID),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           30 * time.Second,
		MaxDeliver:        1, // an exec must never run twice: node commands are acked on receipt
		MaxAckPending:     10_000,
		InactiveThreshold: 24 * time.Hour,
	}
}

// start creates (or updates) both consumers and consumes them.
func (c *consumers) start(ctx context.Context, w *Worker) error {
	pool, err := c.consume(ctx, w, w.poolConsumerConfig(), w.onCreate, poolPull)
	if err != nil {
		return fmt.Errorf("worker: pool consumer: %w", err)
	}
	node, err := c.consume(ctx, w, w.nodeConsumerConfig(), w.onNodeCommand, w.nodePull())
	if err != nil {
		stopConsume(pool)
		return fmt.Errorf("worker: node consumer: %w", err)
	}
	c.pool, c.node = pool, node
	return nil
}

// consume creates one consumer and starts consuming it. Creates are slow
// and acked at the end: the pool pulls only a few ahead so that buffered
// messages do not age out (nats-patterns §7.1).
func (c *consumers) consume(ctx context.Context, w *Worker, cfg jetstream.ConsumerConfig, h jetstream.MessageHandler, pull int) (jetstream.ConsumeContext, error) {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, events.StreamCommands, cfg)
	if err != nil {
		return nil, err
	}
	errHandler := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrNoHeartbeat) {
			select {
			case c.lost <- struct{}{}:
			default:
			}
		}
		w.log.Debug("consumer", "consumer", cfg.Durable, slog.Any("err", err))
	})
	return cons.Consume(h, jetstream.PullMaxMessages(pull), jetstream.PullExpiry(pullExpiry), errHandler)
}

// check looks both consumers up and recreates any that is gone.
func (c *consumers) check(ctx context.Context, w *Worker) {
	for _, x := range []struct {
		cfg  jetstream.ConsumerConfig
		cc   *jetstream.ConsumeContext
		h    jetstream.MessageHandler
		pull int
	}{
		{w.poolConsumerConfig(), &c.pool, w.onCreate, poolPull},
		{w.nodeConsumerConfig(), &c.node, w.onNodeCommand, w.nodePull()},
	} {
		if *x.cc != nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := w.js.Consumer(cctx, events.StreamCommands, x.cfg.Durable)
			cancel()
			if !errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue // there, or the bus cannot tell now: look again later
			}
			w.log.Warn("consumer deleted under a live worker: creating it again", "consumer", x.cfg.Durable)
			stopConsume(*x.cc)
			*x.cc = nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if x.cfg.MaxDeliver == 1 {
			// Node commands queued while the consumer was gone were failed
			// by the router (the worker's lease lapsed) long ago and must
			// not run late: drop them before consuming again. (A work-queue
			// stream allows only deliver-all consumers.)
			w.purgeNodeCommands(cctx, x.cfg.FilterSubject)
		}
		cc, err := c.consume(cctx, w, x.cfg, x.h, x.pull)
		cancel()
		if err != nil {
			w.log.Warn("recreate consumer", "consumer", x.cfg.Durable, slog.Any("err", err))
			continue
		}
		*x.cc = cc
		w.log.Info("consumer recreated", "consumer", x.cfg.Durable)
	}
}

func (c *consumers) stop() {
	stopConsume(c.pool)
	stopConsume(c.node)
	c.pool, c.node = nil, nil
}

// stopConsume stops a consume and waits (bounded) until its handler has
// returned.
func stopConsume(cc jetstream.ConsumeContext) {
	if cc == nil {
		return
	}
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
	}
}

// purgeNodeCommands drops the commands queued on a node subject.
func (w *Worker) purgeNodeCommands(ctx context.Context, subject string) {
	st, err := w.js.Stream(ctx, events.StreamCommands)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		w.log.Warn("drop stale node commands", "subject", subject, slog.Any("err", err))
	}
}
