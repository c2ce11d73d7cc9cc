package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// resumeWorkspaceBytes is the incompressible workspace the resume scenario
// pauses and resumes.
const resumeWorkspaceBytes = 100 << 20

// resumeScenario: per class, the create scenario first (the plain create
// to its first exec, in the same run), then one sandbox holding 100 MiB of
// random bytes in its work directory paused and resumed Count times: the
// pause (snapshot stored, container gone) and the resume to its first exec
// done, the latter set beside the plain create (ratio_p50).
func (b *bench) resumeScenario(ctx context.Context) error {
	for _, class := range b.cfg.Classes {
		if ctx.Err() != nil {
			break
		}
		b.createClass(ctx, class)
		plain := b.report.Measures[len(b.report.Measures)-2] // create to first exec
		if err := b.resumeClass(ctx, class, plain); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (b *bench) resumeClass(ctx context.Context, class string, plain Measure) error {
	cl := b.client(0)
	id, err := b.create(ctx, cl, class)
	if err != nil {
		return fmt.Errorf("bench: resume: create: %w", err)
	}
	defer func() { _ = b.kill(context.WithoutCancel(ctx), cl, id) }()
	fill := fmt.Sprintf("head -c %d /dev/urandom > bench-workspace", resumeWorkspaceBytes)
	ectx, cancel := context.WithTimeout(ctx, opTimeout)
	r, err := cl.Exec(ectx, events.ExecRequest{SandboxID: id, Cmd: []string{"sh", "-c", fill}})
	cancel()
	if err != nil || r.ExitCode != 0 {
		return fmt.Errorf("bench: resume: filling the workspace: %v (exit %d)", err, exitOf(r))
	}
	n := b.cfg.Count
	ps, rs := newSeries("pause (100 MiB)", false, n), newSeries("resume to first exec", false, n)
	bd := bounds{count: n, deadline: time.Now().Add(b.cfg.Duration)}
	pr := startProgress(b.cfg.Progress, "resume "+class, n)
	cmd := b.cmdFor(class)
	for i := 0; bd.more(i) && ctx.Err() == nil; i++ {
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		t := time.Now()
		_, err := cl.Pause(pctx, id)
		cancel()
		ps.add(time.Since(t), err)
		if err != nil {
			pr.op(err)
			break
		}
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		t = time.Now()
		_, err = cl.Resume(rctx, id, 0)
		if err == nil {
			_, err = cl.Exec(rctx, events.ExecRequest{SandboxID: id, Cmd: cmd})
		}
		cancel()
		rs.add(time.Since(t), err)
		pr.op(err)
		if err != nil {
			break
		}
	}
	pr.done()
	for _, s := range []*series{ps, rs} {
		m := s.measureBusy()
		m.Class = class
		m.versus(plain)
		b.report.Measures = append(b.report.Measures, m)
	}
	return nil
}

func exitOf(r *events.ExecResult) int {
	if r == nil {
		return -1
	}
	return r.ExitCode
}
