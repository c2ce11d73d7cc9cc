package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// liveScenario fills the deployment to each population of live sandboxes
// in turn and measures, at each, the latency of exec (on a random live
// sandbox), list, and create and kill of one more, beside a micro PING.
func (b *bench) liveScenario(ctx context.Context) error {
	var live []string
	for _, pop := range b.cfg.Live {
		need := pop - len(live)
		ids := make([]string, need)
		pr := startProgress(b.cfg.Progress, "fill to "+strconv.Itoa(pop)+" live", need)
		err := b.parallel(ctx, need, b.cfg.Parallel, func(ctx context.Context, i int) error {
			id, err := b.create(ctx, b.client(i), b.cfg.Class)
			ids[i] = id
			pr.op(err)
			return err
		})
		pr.done()
		if err != nil {
			return fmt.Errorf("bench: fill to %d live %s sandboxes: %w", pop, b.cfg.Class, err)
		}
		live = append(live, ids...)
		b.measureAt(ctx, pop, live)
		if ctx.Err() != nil {
			break
		}
	}
	return ctx.Err()
}

func (b *bench) measureAt(ctx context.Context, pop int, live []string) {
	cl, nc := b.client(0), b.conns[0]
	n := b.cfg.LiveSamples
	ps := newSeries(b.floorName(), true, n)
	es, ls := newSeries("exec", false, n), newSeries("list", false, n)
	cs, ks := newSeries("create", false, n), newSeries("kill", false, n)
	cmd := b.cmdFor(b.cfg.Class)
	bd := bounds{count: n, deadline: time.Now().Add(b.cfg.Duration)}
	pr := startProgress(b.cfg.Progress, "at "+strconv.Itoa(pop)+" live", n)
	for i := 0; bd.more(i) && ctx.Err() == nil; i++ {
		t := time.Now()
		ps.add(since(t, b.floor(ctx, nc)))
		data := execRequest(live[rand.IntN(len(live))], cmd)
		t = time.Now()
		err := execRaw(ctx, nc, data)
		es.add(time.Since(t), err)
		t = time.Now()
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, lerr := cl.List(lctx, events.ListRequest{})
		cancel()
		ls.add(time.Since(t), lerr)
		t = time.Now()
		id, cerr := b.create(ctx, cl, b.cfg.Class)
		cs.add(time.Since(t), cerr)
		if cerr == nil {
			t = time.Now()
			ks.add(since(t, b.kill(ctx, cl, id)))
		}
		pr.op(err)
	}
	pr.done()
	ping := ps.measureBusy()
	ping.Population, ping.Class = pop, b.cfg.Class
	b.report.Measures = append(b.report.Measures, ping)
	var rss map[string]float64
	for name, pid := range b.cfg.RSS {
		if rss == nil {
			rss = map[string]float64{}
		}
		rss[name] = rssMiB(pid)
	}
	for _, s := range []*series{es, ls, cs, ks} {
		m := s.measureBusy()
		m.Population, m.Class, m.RSSMiB = pop, b.cfg.Class, rss
		m.versus(ping)
		b.report.Measures = append(b.report.Measures, m)
	}
}

// rssMiB is the resident set of a local process (0: unknown).
func rssMiB(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(string(f[0]), 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// cpuTimes are the CPU times of Config.RSS's processes, by name (absent:
// unknown).
func (b *bench) cpuTimes() map[string]time.Duration {
	var out map[string]time.Duration
	for name, pid := range b.cfg.RSS {
		if d, ok := cpuTime(pid); ok {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[name] = d
		}
	}
	return out
}

// cpuPerOp is the CPU µs per operation of each process between two
// readings of cpuTimes.
func cpuPerOp(before, after map[string]time.Duration, ops int) map[string]float64 {
	if ops <= 0 || len(before) == 0 {
		return nil
	}
	out := map[string]float64{}
	for name, d0 := range before {
		if d1, ok := after[name]; ok {
			out[name] = float64((d1 - d0).Microseconds()) / float64(ops)
		}
	}
	return out
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is a local process's user and system CPU time.
func cpuTime(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis (state is field 3, utime 14).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * clockTick, true
}
