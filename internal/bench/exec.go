package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// execScenario: sequential exec latency interleaved with the floor, then
// the throughput of Clients concurrent callers, beside the floor's.
func (b *bench) execScenario(ctx context.Context) error {
	ids, err := b.sandboxes(ctx, min(b.cfg.Clients, 8))
	if err != nil {
		return err
	}
	reqs := make([][]byte, len(ids))
	for i, id := range ids {
		reqs[i] = execRequest(id, b.cmdFor(b.cfg.Class))
	}
	nc := b.conns[0]
	for range b.cfg.Warmup {
		if err := execRaw(ctx, nc, reqs[0]); err != nil {
			return fmt.Errorf("bench: warm-up exec: %w", err)
		}
		_ = b.floor(ctx, nc)
		_ = b.bare(ctx, nc, reqs[0])
	}
	name := "exec sequential"
	if b.cfg.Pause > 0 {
		name += ", " + b.cfg.Pause.String() + " apart"
	}
	floors, seq := b.sequential(ctx, name, func(ctx context.Context) error { return execRaw(ctx, nc, reqs[0]) })
	floorT := b.throughput(ctx, "floor request/reply concurrent", true, func(ctx context.Context, nc *nats.Conn, g int) error {
		return b.bare(ctx, nc, reqs[g%len(reqs)])
	})
	execT := b.throughput(ctx, "exec concurrent", false, func(ctx context.Context, nc *nats.Conn, g int) error {
		return execRaw(ctx, nc, reqs[g%len(reqs)])
	})
	execT.versus(floorT)
	b.report.Measures = append(append(b.report.Measures, floors...), seq, floorT, execT)
	return ctx.Err()
}

// sandboxes creates n sandboxes of the run's class.
func (b *bench) sandboxes(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	err := b.parallel(ctx, n, b.cfg.Parallel, func(ctx context.Context, i int) error {
		id, err := b.create(ctx, b.client(i), b.cfg.Class)
		ids[i] = id
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: create a %s sandbox: %w", b.cfg.Class, err)
	}
	return ids, nil
}

// sequential measures op one at a time, each beside a micro PING (when it
// answers) and a bare request/reply on the same connection, and returns
// the floor's series and op's, with its ratio to the PING (else to the
// bare request/reply).
func (b *bench) sequential(ctx context.Context, name string, op func(context.Context) error) (floors []Measure, m Measure) {
	nc := b.conns[0]
	data := make([]byte, 128)
	ps, bs, ms := newSeries("floor ping", true, b.cfg.Count), newSeries("floor request/reply", true, b.cfg.Count), newSeries(name, false, b.cfg.Count)
	bd := bounds{count: b.cfg.Count, deadline: time.Now().Add(b.cfg.Duration)}
	pr := startProgress(b.cfg.Progress, name, b.cfg.Count)
	for i := 0; bd.more(i) && ctx.Err() == nil; i++ {
		if b.cfg.Pause > 0 {
			pause(ctx, b.cfg.Pause) // an agent's think time, not synchronisation
		}
		t := time.Now()
		if b.pingOK {
			ps.add(since(t, b.ping(ctx, nc)))
		}
		t = time.Now()
		bs.add(since(t, b.bare(ctx, nc, data)))
		t = time.Now()
		err := op(ctx)
		ms.add(time.Since(t), err)
		pr.op(err)
	}
	pr.done()
	bare := bs.measureBusy()
	m = ms.measureBusy()
	floors = []Measure{bare}
	if b.pingOK {
		ping := ps.measureBusy()
		floors = []Measure{ping, bare}
	}
	m.versus(floors[0])
	return floors, m
}

// throughput runs op from Clients goroutines over the connections, until
// 20×Count operations or Duration.
func (b *bench) throughput(ctx context.Context, name string, floor bool, op func(ctx context.Context, nc *nats.Conn, g int) error) Measure {
	total := min(20*b.cfg.Count, MaxCount)
	s := newSeries(name, floor, total)
	deadline := time.Now().Add(b.cfg.Duration)
	pr := startProgress(b.cfg.Progress, name, total)
	cpu0 := b.cpuTimes()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range b.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc := b.conns[g%len(b.conns)]
			for next.Add(1) <= int64(total) && time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				err := op(ctx, nc, g)
				s.add(time.Since(t), err)
				pr.op(err)
			}
		}()
	}
	wg.Wait()
	s.done()
	pr.done()
	m := s.measure()
	m.Clients = b.cfg.Clients
	m.CPUPerOp = cpuPerOp(cpu0, b.cpuTimes(), m.Ops+m.errorCount())
	return m
}
