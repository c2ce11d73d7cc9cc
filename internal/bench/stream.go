package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// streamScenario: Count streamed execs of StreamBytes each, every chunk's
// sequence checked and every byte counted, beside the floor: the same
// bytes in the same chunks published from one bench connection to a
// subscriber on another, sequence checked too.
func (b *bench) streamScenario(ctx context.Context) error {
	ids, err := b.sandboxes(ctx, 1)
	if err != nil {
		return err
	}
	floor := newSeries("floor publish/subscribe", true, b.cfg.Count)
	sys := newSeries("stream", false, b.cfg.Count)
	bd := bounds{count: b.cfg.Count, deadline: time.Now().Add(b.cfg.Duration)}
	pr := startProgress(b.cfg.Progress, "stream", b.cfg.Count)
	// The CPU of Config.RSS's processes during each side's operations only
	// (they alternate): a cost per stream that holds on a busy machine,
	// where MB/s does not.
	floorCPU, sysCPU := map[string]time.Duration{}, map[string]time.Duration{}
	ops := 0
	for i := 0; bd.more(i) && ctx.Err() == nil; i++ {
		c0 := b.cpuTimes()
		t := time.Now()
		n, err := b.floorStream(ctx)
		floor.add(time.Since(t), err)
		floor.addBytes(n)
		c1 := b.cpuTimes()
		t = time.Now()
		n, err = b.stream(ctx, ids[0])
		sys.add(time.Since(t), err)
		sys.addBytes(n)
		addCPU(floorCPU, c0, c1)
		addCPU(sysCPU, c1, b.cpuTimes())
		ops++
		pr.op(err)
	}
	pr.done()
	// MB/s over the time spent in each side only (they alternate).
	fm, sm := floor.measureBusy(), sys.measureBusy()
	fm.CPUPerOp = cpuPerOp(zeroCPU(floorCPU), floorCPU, ops)
	sm.CPUPerOp = cpuPerOp(zeroCPU(sysCPU), sysCPU, ops)
	sm.versus(fm)
	if fm.MBps > 0 {
		sm.RatioRate = sm.MBps / fm.MBps
	}
	b.report.Measures = append(b.report.Measures, fm, sm)
	return ctx.Err()
}

// stream runs one streamed exec writing StreamBytes and reads it all.
func (b *bench) stream(ctx context.Context, sandbox string) (int64, error) {
	size := b.cfg.StreamBytes
	cmd := streamCmd(b.cfg)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := b.client(0).Stream(ctx, events.ExecRequest{SandboxID: sandbox, Cmd: cmd, OutputLimit: max(size, events.DefaultStreamOutputCap)})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var n int64
	last := map[string]uint64{}
	for {
		c, err := p.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		if c.Missing != 0 || c.Seq != last[c.Stream]+1 {
			return n, fmt.Errorf("bench: %s chunk %d after %d (%d missing)", c.Stream, c.Seq, last[c.Stream], c.Missing)
		}
		last[c.Stream] = c.Seq
		n += int64(len(c.Data))
	}
	res, err := p.Wait()
	if err != nil {
		return n, err
	}
	if res.ExitCode != 0 || n != size {
		return n, fmt.Errorf("bench: stream read %d bytes with exit code %d, want %d and 0", n, res.ExitCode, size)
	}
	return n, nil
}

// streamCmd is the command that writes cfg.StreamBytes to stdout.
func streamCmd(cfg Config) []string {
	size := strconv.FormatInt(cfg.StreamBytes, 10)
	switch {
	case cfg.Class == "fake":
		return []string{"write", size, strconv.Itoa(cfg.StreamChunk)}
	case cfg.StreamWriter == "head":
		return []string{"head", "-c", size, "/dev/zero"}
	}
	return []string{"dd", "if=/dev/zero", "bs=" + strconv.Itoa(cfg.StreamChunk),
		"count=" + strconv.FormatInt(cfg.StreamBytes/int64(cfg.StreamChunk), 10), "status=none"}
}

// floorStream publishes StreamBytes in StreamChunk messages, each with its
// sequence, to a subscriber on bench's other connection and waits for the
// last one.
func (b *bench) floorStream(ctx context.Context) (int64, error) {
	subj := b.echoNC.NewRespInbox()
	chunks := int((b.cfg.StreamBytes + int64(b.cfg.StreamChunk) - 1) / int64(b.cfg.StreamChunk))
	done := make(chan error, 1)
	var got atomic.Int64
	var seq uint64 // the subscription's goroutine only
	sub, err := b.echoNC.Subscribe(subj, func(m *nats.Msg) {
		seq++
		if s, _ := strconv.ParseUint(m.Header.Get("Seq"), 10, 64); s != seq {
			select {
			case done <- fmt.Errorf("bench: floor chunk %d, want %d", s, seq):
			default:
			}
			return
		}
		got.Add(int64(len(m.Data)))
		if int(seq) == chunks {
			select {
			case done <- nil:
			default:
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := b.echoNC.Flush(); err != nil {
		return 0, err
	}
	buf := make([]byte, b.cfg.StreamChunk)
	nc := b.conns[0]
	left := b.cfg.StreamBytes
	for i := 1; i <= chunks; i++ {
		m := nats.NewMsg(subj)
		m.Header.Set("Seq", strconv.Itoa(i))
		m.Data = buf[:min(int64(len(buf)), left)]
		left -= int64(len(m.Data))
		if err := nc.PublishMsg(m); err != nil {
			return 0, err
		}
	}
	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case err := <-done:
		return got.Load(), err
	case <-t.C:
		return got.Load(), fmt.Errorf("bench: floor stream: %w", context.DeadlineExceeded)
	case <-ctx.Done():
		return got.Load(), ctx.Err()
	}
}

// addCPU adds each process's CPU time between two readings of cpuTimes to
// sum.
func addCPU(sum, before, after map[string]time.Duration) {
	for name, d0 := range before {
		if d1, ok := after[name]; ok {
			sum[name] += d1 - d0
		}
	}
}

// zeroCPU is a reading of no CPU time for the processes of sum (cpuPerOp's
// "before" for a sum of differences).
func zeroCPU(sum map[string]time.Duration) map[string]time.Duration {
	if len(sum) == 0 {
		return nil
	}
	z := make(map[string]time.Duration, len(sum))
	for name := range sum {
		z[name] = 0
	}
	return z
}
