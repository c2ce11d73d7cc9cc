package bench

import (
	"context"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// createScenario: per class, create → first exec done → kill, one at a
// time, beside a micro PING each; reports the create reply, the time to
// interactive (create sent to first exec answered) and the kill.
func (b *bench) createScenario(ctx context.Context) error {
	for _, class := range b.cfg.Classes {
		if ctx.Err() != nil {
			break
		}
		b.createClass(ctx, class)
	}
	return ctx.Err()
}

func (b *bench) createClass(ctx context.Context, class string) {
	cl, nc := b.client(0), b.conns[0]
	n := b.cfg.Count
	ps := newSeries(b.floorName(), true, n)
	cs, is, ks := newSeries("create", false, n), newSeries("create to first exec", false, n), newSeries("kill", false, n)
	bd := bounds{count: n, deadline: time.Now().Add(b.cfg.Duration)}
	pr := startProgress(b.cfg.Progress, "create "+class, n)
	cmd := b.cmdFor(class)
	for i := 0; bd.more(i) && ctx.Err() == nil; i++ {
		t := time.Now()
		ps.add(since(t, b.floor(ctx, nc)))
		t0 := time.Now()
		id, err := b.create(ctx, cl, class)
		cs.add(time.Since(t0), err)
		if err != nil {
			is.add(0, err)
			pr.op(err)
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err = cl.Exec(ectx, events.ExecRequest{SandboxID: id, Cmd: cmd})
		cancel()
		is.add(time.Since(t0), err)
		t = time.Now()
		ks.add(since(t, b.kill(ctx, cl, id)))
		pr.op(err)
		if b.cfg.Pause > 0 {
			pause(ctx, b.cfg.Pause) // think time, not synchronisation
		}
	}
	pr.done()
	ping := ps.measureBusy()
	ping.Class = class
	b.report.Measures = append(b.report.Measures, ping)
	for _, s := range []*series{cs, is, ks} {
		m := s.measureBusy()
		m.Class = class
		m.versus(ping)
		b.report.Measures = append(b.report.Measures, m)
	}
}
