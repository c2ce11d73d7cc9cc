package deadline

import (
	"sync"
	"time"
)

// Deadline is a channel closed when a deadline passes. Init it before use.
type Deadline struct {
	mu    sync.Mutex
	ch    chan struct{}
	timer *time.Timer
}

// Init makes it ready, with no deadline.
func (d *Deadline) Init() { d.ch = make(chan struct{}) }

// Done is closed once the deadline set last has passed.
func (d *Deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

// Set moves the deadline: zero is none, a time already past closes Done at
// once. A passed deadline is replaced by a fresh channel.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	select {
	case <-d.ch:
		d.ch = make(chan struct{})
	default:
	}
	switch {
	case t.IsZero():
	case !t.After(time.Now()):
		close(d.ch)
	default:
		ch := d.ch
		d.timer = time.AfterFunc(time.Until(t), func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.ch == ch {
				close(ch)
			}
		})
	}
}

// Stop stops its timer (the connection ended).
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
}
