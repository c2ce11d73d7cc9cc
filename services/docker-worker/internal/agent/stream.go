package agent

import (
	"fmt"
	"io"
	"sync"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// maxQueued bounds the chunks queued on a stream (bytes are bounded by the
// window): an agent that floods one-byte frames is cut off.
const maxQueued = 1 << 16

// creditBatch: consumed output is credited back to the agent in increments of
// at least a quarter of the window, one window frame per 256 KiB instead of
// one per frame (each is a trip through the daemon's attach copy). The agent
// always keeps three quarters of its window, so it never waits for credit
// held back here.
const creditBatch = proto.DefaultWindow / 4

// stream is one operation's state on the worker.
type stream struct {
	c        *Client
	id       uint32
	inCredit *credit
	// window is what the agent may send before credit comes back
	// (proto.DefaultWindow; dialRecvWindow on a dial).
	window int64

	mu          sync.Mutex
	q           []chunk
	outstanding int64 // received and not yet credited back
	unsent      int64 // of outstanding, consumed: credit not yet sent (creditBatch)
	lastSeq     uint64
	result      *proto.Result
	err         error
	ended       bool
	wake        chan struct{}
	// dial is set on a dial's stream before it is opened (dial.go).
	dial *dialState
}

type chunk struct {
	t  proto.Type
	b  []byte
	bp *[]byte // b's buffer, from chunkBufs
}

// chunkBufs recycles the queued output's buffers (64 KiB and up): a stream
// of output would otherwise allocate its whole size again in the worker.
var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

// recycle gives c's buffer back once its bytes have been written (an
// io.Writer does not keep them).
func (c chunk) recycle() {
	if c.bp != nil && cap(c.b) <= 4*proto.MaxData {
		*c.bp = c.b[:0]
		chunkBufs.Put(c.bp)
	}
}

func newStream(c *Client, id uint32) *stream {
	return &stream{c: c, id: id, inCredit: newCredit(proto.DefaultWindow), window: proto.DefaultWindow, wake: make(chan struct{}, 1)}
}

func (s *stream) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// data queues an output frame after checking it against the window and the
// sequence.
func (s *stream) data(f proto.Frame) error {
	if len(f.Payload) == 0 {
		return fmt.Errorf("%w: empty %s frame", proto.ErrProtocol, f.Type)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Seq != s.lastSeq+1 {
		return fmt.Errorf("%w: stream %d: frame %d after %d", proto.ErrProtocol, s.id, f.Seq, s.lastSeq)
	}
	s.lastSeq = f.Seq
	if s.outstanding+int64(len(f.Payload)) > s.window {
		return fmt.Errorf("%w: stream %d sent past its window", proto.ErrProtocol, s.id)
	}
	s.outstanding += int64(len(f.Payload))
	if n := len(s.q); n > 0 && s.q[n-1].t == f.Type && len(s.q[n-1].b) < proto.MaxData {
		s.q[n-1].b = append(s.q[n-1].b, f.Payload...)
	} else {
		if len(s.q) >= maxQueued {
			return fmt.Errorf("%w: stream %d: too many queued frames", proto.ErrProtocol, s.id)
		}
		bp := chunkBufs.Get().(*[]byte)
		s.q = append(s.q, chunk{t: f.Type, b: append((*bp)[:0], f.Payload...), bp: bp})
	}
	s.notify()
	return nil
}

func (s *stream) finish(r *proto.Result, err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.result, s.err = true, r, err
	}
	s.mu.Unlock()
	s.inCredit.close()
	s.notify()
}

// next returns the next chunk, or the end (result or error) once the queue
// is drained. cancel, when it fires, is returned as cancelled=true.
func (s *stream) next(cancel <-chan struct{}) (c chunk, r *proto.Result, err error, cancelled bool) {
	for {
		s.mu.Lock()
		if len(s.q) > 0 {
			c = s.q[0]
			s.q[0] = chunk{}
			s.q = s.q[1:]
			s.mu.Unlock()
			return c, nil, nil, false
		}
		if s.ended {
			r, err = s.result, s.err
			s.mu.Unlock()
			return chunk{}, r, err, false
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-cancel:
			return chunk{}, nil, nil, true
		}
	}
}

// credit gives n bytes back to the agent.
func (s *stream) credit(n int) {
	s.mu.Lock()
	s.unsent += int64(n)
	k := s.unsent
	if k < creditBatch {
		s.mu.Unlock()
		return
	}
	s.unsent = 0
	s.outstanding -= k
	s.mu.Unlock()
	_ = s.c.send(proto.Frame{Type: proto.TWindow, Stream: s.id, Payload: proto.WindowPayload(uint32(k))})
}

// sendInput copies r to the agent as frames of type t within the agent's
// window, then sends EOF. It returns when r ends or the stream does.
func (s *stream) sendInput(t proto.Type, r io.Reader) error {
	buf := make([]byte, proto.MaxData)
	for {
		k, ok := s.inCredit.take(proto.MaxData)
		if !ok {
			return nil
		}
		n, err := r.Read(buf[:k])
		if n < k {
			s.inCredit.add(int64(k - n))
		}
		if n > 0 {
			if e := s.c.send(proto.Frame{Type: t, Stream: s.id, Payload: buf[:n]}); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return s.c.send(proto.Frame{Type: proto.TEOF, Stream: s.id})
		}
		if err != nil {
			_ = s.c.send(proto.Frame{Type: proto.TEOF, Stream: s.id})
			return err
		}
	}
}

// credit is a send window.
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
	c.signal()
}

func (c *credit) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *credit) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.signal()
}

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
