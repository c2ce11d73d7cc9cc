package bench

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progress prints "\r<name>: <n>/<total> ops, <e> errors, <t>s" to w every
// 250 ms while a series runs, and a newline when it ends.
type progress struct {
	w     io.Writer
	name  string
	total int
	start time.Time
	n     atomic.Int64
	errs  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

// startProgress starts the printer; a nil w prints nothing.
func startProgress(w io.Writer, name string, total int) *progress {
	p := &progress{w: w, name: name, total: total, start: time.Now(), stop: make(chan struct{})}
	if w == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				p.print("\n")
				return
			case <-t.C:
				p.print("")
			}
		}
	}()
	return p
}

func (p *progress) print(end string) {
	fmt.Fprintf(p.w, "\r%s: %d/%d ops, %d errors, %.1fs%s", p.name, p.n.Load(), p.total, p.errs.Load(), time.Since(p.start).Seconds(), end)
}

// op counts one operation.
func (p *progress) op(err error) {
	p.n.Add(1)
	if err != nil {
		p.errs.Add(1)
	}
}

// done stops the printer and waits for it.
func (p *progress) done() {
	close(p.stop)
	p.wg.Wait()
}
