package server

import (
	"sync"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// stream is one request's state on the agent.
type stream struct {
	c         *conn
	proc      *proc // an exec's, set before the stream is visible to others
	id        uint32
	seq       uint64 // of frames sent on it, under the sender's lock
	outCredit *credit
	in        *inbox

	mu       sync.Mutex
	onCancel func()
	onSignal func(proto.Signal)
	onResize func(proto.Resize)
	// resized is the last size asked for before onResize was set (the
	// process not started yet): setResizer applies it.
	resized  *proto.Resize
	canceled bool
}

func newStream(c *conn, id uint32) *stream {
	return &stream{c: c, id: id, outCredit: newCredit(proto.DefaultWindow), in: newInbox(proto.DefaultWindow)}
}

func (s *stream) cancel() {
	s.mu.Lock()
	s.canceled = true
	f := s.onCancel
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

func (s *stream) signal(sg proto.Signal) {
	s.mu.Lock()
	f := s.onSignal
	s.mu.Unlock()
	if f != nil {
		f(sg)
	}
}

func (s *stream) resize(r proto.Resize) {
	s.mu.Lock()
	f := s.onResize
	if f == nil {
		s.resized = &r
	}
	s.mu.Unlock()
	if f != nil {
		f(r)
	}
}

// setResizer sets onResize, under s.mu, and applies a size asked for
// before it was set.
func (s *stream) setResizer(f func(proto.Resize)) {
	s.onResize = f
	if s.resized != nil {
		f(*s.resized)
		s.resized = nil
	}
}

// credit is a send window: take blocks until some is granted or it is closed.
type credit struct {
	mu     sync.Mutex
	n      int64
	closed bool
	wake   chan struct{}
}

func newCredit(n int64) *credit { return &credit{n: n, wake: make(chan struct{}, 1)} }

func (c *credit) add(n int64) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns up to max bytes of credit, waiting for some.
func (c *credit) take(max int) (int, bool) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, false
		}
		if c.n > 0 {
			k := int(min(int64(max), c.n))
			c.n -= int64(k)
			c.mu.Unlock()
			return k, true
		}
		c.mu.Unlock()
		<-c.wake
	}
}

// inbox holds what the worker sent on a stream, within the window granted.
type inbox struct {
	mu     sync.Mutex
	q      [][]byte
	bytes  int64
	max    int64
	closed bool
	// eof says the worker closed it (TEOF), not the connection's end.
	eof  bool
	wake chan struct{}
}

func newInbox(max int64) *inbox { return &inbox{max: max, wake: make(chan struct{}, 1)} }

// push queues a copy of b; false means the sender overran its window.
func (b *inbox) push(p []byte) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return true
	}
	if b.bytes+int64(len(p)) > b.max {
		b.mu.Unlock()
		return false
	}
	b.q = append(b.q, append([]byte(nil), p...))
	b.bytes += int64(len(p))
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return true
}

func (b *inbox) close() { b.end(false) }

// closeEOF is the worker's end of the stream's input.
func (b *inbox) closeEOF() { b.end(true) }

func (b *inbox) end(eof bool) {
	b.mu.Lock()
	if !b.closed {
		b.eof = eof
	}
	b.closed = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// byWorker reports whether the worker closed the inbox (TEOF).
func (b *inbox) byWorker() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// pop returns the next chunk; false at the end (closed and drained). The
// caller grants the chunk's length back as credit once it is used.
func (b *inbox) pop() ([]byte, bool) {
	for {
		b.mu.Lock()
		if len(b.q) > 0 {
			p := b.q[0]
			b.q = b.q[1:]
			b.bytes -= int64(len(p))
			b.mu.Unlock()
			return p, true
		}
		if b.closed {
			b.mu.Unlock()
			return nil, false
		}
		b.mu.Unlock()
		<-b.wake
	}
}
