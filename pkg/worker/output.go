package worker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// streamWriter publishes one output stream of one process to SBX_OUT. Writes
// are coalesced into chunks of up to chunkSize bytes, flushed at least every
// flushEvery; at most window publishes are unacknowledged at a time, so a slow
// bus blocks Write (and through it the process's pipe) instead of growing a
// buffer. Past limit bytes, output is counted but dropped and truncated set.
type streamWriter struct {
	js         jetstream.JetStream
	subject    string
	msgIDBase  string
	chunkSize  int
	flushEvery time.Duration
	limit      int64
	// share, when set, grants bytes of the sandbox's share of SBX_OUT;
	// shareCut says it granted less than was written.
	share    func(n int64) int64
	shareCut bool
	// overhead is what a message stores besides its data (subject,
	// headers, framing), charged to the share for each message a write
	// starts: a process writing a few bytes per flush interval stores a
	// message per write, ten times its data.
	overhead int64

	mu        sync.Mutex
	buf       []byte
	seq       uint64
	offset    int64 // bytes written before the first byte of buf, plus those in it
	total     int64
	truncated bool
	err       error
	timer     *time.Timer
	closed    bool
	// inflight are the unacknowledged publishes, oldest first, at most
	// window of them.
	inflight []inflightPub
	window   int
	// free holds chunk buffers whose publish was acknowledged: a chunk's
	// buffer becomes its message's data, and is written again only once
	// the stream stored it (a failed publish is retried from it). Cloning
	// every chunk instead was 4 % of dev's CPU under bench stream, and a
	// chunkSize allocation a chunk.
	free [][]byte
	made int // buffers made (the rest were reused)
}

type inflightPub struct {
	msg *nats.Msg
	fut jetstream.PubAckFuture
}

func newStreamWriter(js jetstream.JetStream, subject, msgIDBase string, chunkSize int, flushEvery time.Duration, window int, limit int64) *streamWriter {
	return &streamWriter{js: js, subject: subject, msgIDBase: msgIDBase, chunkSize: chunkSize,
		flushEvery: flushEvery, limit: limit, inflight: make([]inflightPub, 0, window), window: window,
		overhead: messageOverhead(subject, msgIDBase)}
}

// messageOverhead is what SBX_OUT stores for an output message besides its
// data, rounded up: the subject, Sbx-Seq and Nats-Msg-Id (with up to 20
// digits each), the header framing and the store's own record.
func messageOverhead(subject, msgIDBase string) int64 {
	return int64(len(subject)+len(events.HeaderSeq)+len(events.HeaderMsgID)+len(msgIDBase)) + 2*20 + 64
}

// newMessages is how many messages writing n more bytes starts (the one
// the buffer holds is already counted).
func (s *streamWriter) newMessages(n int) int64 {
	b := len(s.buf)
	msgs := (b + n + s.chunkSize - 1) / s.chunkSize
	if b > 0 {
		msgs--
	}
	return int64(msgs)
}

// resume continues a stream a predecessor wrote: seq chunks of offset bytes
// are stored.
func (s *streamWriter) resume(seq uint64, offset int64) {
	s.seq, s.offset, s.total = seq, offset, offset
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	n := len(p)
	s.total += int64(n)
	if room := s.limit - (s.total - int64(n)); room < int64(n) {
		s.truncated = true
		if room <= 0 {
			s.offset += int64(n)
			return n, nil
		}
		p = p[:room]
	}
	if s.share != nil && len(p) > 0 {
		over := s.newMessages(len(p)) * s.overhead
		cost := int64(len(p)) + over
		if g := s.share(cost); g < cost {
			// Cut to what the grant pays for besides the messages' overhead.
			s.truncated, s.shareCut = true, true
			p = p[:max(g-over, 0)]
		}
	}
	dropped := int64(n - len(p))
	for len(p) > 0 {
		if s.buf == nil {
			s.buf = s.takeBuffer()
		}
		take := min(len(p), s.chunkSize-len(s.buf))
		s.buf = append(s.buf, p[:take]...)
		s.offset += int64(take)
		p = p[take:]
		if len(s.buf) >= s.chunkSize {
			if err := s.flushLocked(); err != nil {
				return 0, err
			}
		}
	}
	s.offset += dropped
	if len(s.buf) > 0 && s.timer == nil && !s.closed {
		s.timer = time.AfterFunc(s.flushEvery, s.timedFlush)
	}
	return n, nil
}

func (s *streamWriter) timedFlush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	if s.err == nil && len(s.buf) > 0 {
		s.err = s.flushLocked()
	}
}

// flushLocked publishes the buffer as one chunk. It may block on the window.
func (s *streamWriter) flushLocked() error {
	if len(s.buf) == 0 {
		return nil
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.seq++
	m := nats.NewMsg(s.subject)
	m.Data = s.buf
	s.buf = nil // the next write takes a free buffer
	seq := strconv.FormatUint(s.seq, 10)
	m.Header[events.HeaderSeq] = []string{seq}
	m.Header[events.HeaderOffset] = []string{strconv.FormatInt(s.offset, 10)}
	m.Header[events.HeaderMsgID] = []string{s.msgIDBase + "-" + seq}
	// A publish that failed (its ack lost in a reconnect, the stream not
	// ready after a restart) goes again before this chunk, not when the
	// window is full or the stream closes: a reader must not see chunk
	// n+1 stored long before chunk n and take n for lost.
	if err := s.settleFailed(); err != nil {
		return err
	}
	if len(s.inflight) == s.window {
		if err := s.settle(s.popInflight()); err != nil {
			return err
		}
	}
	fut, err := s.js.PublishMsgAsync(m)
	if err != nil {
		return s.publishSync(m, err)
	}
	s.inflight = append(s.inflight, inflightPub{msg: m, fut: fut})
	return nil
}

// settleFailed takes the oldest publishes whose outcome is known off the
// window, publishing again, synchronously, each that failed.
func (s *streamWriter) settleFailed() error {
	for len(s.inflight) > 0 {
		select {
		case <-s.inflight[0].fut.Ok():
			s.stored(s.popInflight())
		case err := <-s.inflight[0].fut.Err():
			p := s.popInflight()
			if perr := s.publishSync(p.msg, err); perr != nil {
				return perr
			}
			s.stored(p)
		default:
			return nil // the oldest is still waiting for its ack
		}
	}
	return nil
}

func (s *streamWriter) popInflight() inflightPub {
	p := s.inflight[0]
	n := copy(s.inflight, s.inflight[1:]) // a window is a few dozen at most
	s.inflight[n] = inflightPub{}
	s.inflight = s.inflight[:n]
	return p
}

// settle waits for one publish; a failed one is retried synchronously, and
// its Nats-Msg-Id makes a duplicate harmless.
func (s *streamWriter) settle(p inflightPub) error {
	select {
	case <-p.fut.Ok():
	case err := <-p.fut.Err():
		if err := s.publishSync(p.msg, err); err != nil {
			return err
		}
	}
	s.stored(p)
	return nil
}

// stored takes back the buffer of a chunk the stream stored: nothing
// reads it again.
func (s *streamWriter) stored(p inflightPub) {
	s.free = append(s.free, p.msg.Data[:0])
}

// takeBuffer is an empty chunk buffer: a stored chunk's, or a new one.
func (s *streamWriter) takeBuffer() []byte {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b
	}
	s.made++
	return make([]byte, 0, s.chunkSize)
}

func (s *streamWriter) publishSync(m *nats.Msg, cause error) error {
	if err := publishRetry(s.js, m, nil); err != nil {
		return fmt.Errorf("publish output to %s: %w (first failure: %v)", s.subject, err, cause)
	}
	return nil
}

// publishRetry publishes m synchronously, retrying with back-off for up to
// about 30 s or until stop is closed. Callers set Nats-Msg-Id, so a retry
// of a publish that did land is dropped by the stream.
func publishRetry(js jetstream.JetStream, m *nats.Msg, stop <-chan struct{}) error {
	var last error
	for attempt := 0; attempt < 8; attempt++ {
		ctx, cancel := context.WithTimeout(detached(), 5*time.Second)
		_, err := js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-stop:
			return last
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond): // back-off between retries
		}
	}
	return last
}

// Close flushes and waits until every chunk is stored. It returns the last
// sequence number published.
func (s *streamWriter) Close() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.err == nil {
		s.err = s.flushLocked()
	}
	for len(s.inflight) > 0 {
		if err := s.settle(s.popInflight()); err != nil && s.err == nil {
			s.err = err
		}
	}
	return s.seq, s.err
}

// cappedBuffer keeps the first limit bytes written and counts the rest;
// with keepTail, the first limit/2 and the last limit-limit/2 (a ring),
// so that a long output's real end is kept too.
type cappedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int64
	total     int64
	truncated bool

	keepTail bool
	ring     []byte // the last bytes past the head, oldest at pos once full
	pos      int
	full     bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if c.keepTail {
		c.writeHeadTail(p)
		return len(p), nil
	}
	room := c.limit - int64(c.buf.Len())
	if int64(len(p)) > room {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// writeHeadTail fills the head (limit/2 bytes), then the ring.
func (c *cappedBuffer) writeHeadTail(p []byte) {
	if room := int(c.limit/2) - c.buf.Len(); room > 0 {
		k := min(room, len(p))
		c.buf.Write(p[:k])
		p = p[k:]
	}
	if len(p) == 0 {
		return
	}
	if c.ring == nil {
		c.ring = make([]byte, 0, c.limit-c.limit/2)
	}
	size := cap(c.ring)
	if size == 0 {
		c.truncated = true
		return
	}
	for len(p) > 0 {
		if !c.full {
			k := min(size-len(c.ring), len(p))
			c.ring = append(c.ring, p[:k]...)
			p = p[k:]
			c.full = len(c.ring) == size
			continue
		}
		c.truncated = true
		if len(p) >= size {
			p = p[len(p)-size:]
		}
		k := copy(c.ring[c.pos:], p)
		c.pos = (c.pos + k) % size
		p = p[k:]
	}
}

// output is what the buffer kept, and where bytes were dropped inside it
// (0: nowhere, or only after it).
func (c *cappedBuffer) output() (data []byte, cut int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.keepTail {
		return c.buf.Bytes(), 0
	}
	head := c.buf.Len()
	data = append(append(make([]byte, 0, head+len(c.ring)), c.buf.Bytes()...), c.ring[c.pos:]...)
	data = append(data, c.ring[:c.pos]...)
	if c.total > int64(len(data)) {
		cut = int64(head)
	}
	return data, cut
}
