package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/deadline"
)

// Errors of Dial, besides the client's own.
var (
	// ErrRefused: nothing in the sandbox accepts connections on the port.
	ErrRefused = errors.New("agent: connection refused in the sandbox")
	// ErrNoDial: the agent predates dials (its hello does not name them).
	ErrNoDial = errors.New("agent: the sandbox's agent does not carry connections")
	// ErrDialBusy: the agent carries as many connections as it may.
	ErrDialBusy = errors.New("agent: the sandbox's agent carries too many connections")
	// ErrUnreachable: the agent could not connect for another reason (a
	// connect timeout on a full backlog, an unreachable address).
	ErrUnreachable = errors.New("agent: the port cannot be reached in the sandbox")
)

// dialSendWindow is what the worker sends on a dial before the agent
// credits it back: half the window the protocol allows, so that a server in
// the sandbox that stops reading holds at most this much of the agent's
// memory per connection.
const dialSendWindow = proto.DefaultWindow / 2

// dialRecvWindow is what the agent sends on a dial before the worker
// credits it back (the agent's dialWindow): the worker holds at most this
// much of each connection's bytes, and cuts an agent that sends more.
const dialRecvWindow = proto.DefaultWindow / 2

// dialState is a dial stream's own state.
type dialState struct {
	connected chan struct{} // closed on TConnected
	gotConn   bool          // under the stream's mu
	eof       bool          // TEOF came (under the stream's mu)
}

// dialFrame handles a dial's TConnected and TEOF; on any other stream they
// break the protocol.
func (s *stream) dialFrame(f proto.Frame) error {
	if s.dial == nil {
		return fmt.Errorf("%w: %s frame on stream %d, not a dial", proto.ErrProtocol, f.Type, s.id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f.Type {
	case proto.TConnected:
		if s.dial.gotConn || len(f.Payload) != 0 {
			return fmt.Errorf("%w: stream %d: a second connected frame", proto.ErrProtocol, s.id)
		}
		s.dial.gotConn = true
		close(s.dial.connected)
	case proto.TEOF:
		if !s.dial.gotConn || s.dial.eof {
			return fmt.Errorf("%w: stream %d: end of data before the connection or twice", proto.ErrProtocol, s.id)
		}
		if f.Seq != s.lastSeq+1 {
			return fmt.Errorf("%w: stream %d: frame %d after %d", proto.ErrProtocol, s.id, f.Seq, s.lastSeq)
		}
		s.lastSeq = f.Seq
		s.dial.eof = true
		s.q = append(s.q, chunk{t: proto.TEOF})
		s.notify()
	}
	return nil
}

// tryNextData takes the next queued data chunk into c, if one is queued
// (never the end of data: Read finds that on its next call).
func (s *stream) tryNextData(c *chunk) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.q) == 0 || s.q[0].b == nil {
		return false
	}
	*c = s.q[0]
	s.q[0] = chunk{}
	s.q = s.q[1:]
	return true
}

// Dial connects to port on the sandbox's loopback through the agent. The
// connection's Close ends the agent's; CloseWrite half-closes it.
func (c *Client) Dial(ctx context.Context, port int) (*DialConn, error) {
	if !c.hello.HasFeature(proto.FeatureDial) {
		return nil, ErrNoDial
	}
	req := proto.Request{Op: proto.OpDial, Port: port}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("agent: dial: port %d is out of range", port)
	}
	b, _ := json.Marshal(req)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	st := newStream(c, c.nextID)
	st.dial = &dialState{connected: make(chan struct{})}
	st.inCredit = newCredit(dialSendWindow)
	st.window = dialRecvWindow
	c.streams[st.id] = st
	c.mu.Unlock()
	d := &DialConn{c: c, st: st, port: port}
	d.rdl.Init()
	if err := c.send(proto.Frame{Type: proto.TRequest, Stream: st.id, Payload: b}); err != nil {
		c.forget(st)
		return nil, err
	}
	for {
		select {
		case <-st.dial.connected:
			return d, nil
		case <-st.wake:
			st.mu.Lock()
			ended, r, err := st.ended, st.result, st.err
			st.mu.Unlock()
			if !ended {
				continue
			}
			c.forget(st)
			if err != nil {
				return nil, err
			}
			return nil, dialErr(port, r)
		case <-ctx.Done():
			_ = d.Close()
			return nil, ctx.Err()
		}
	}
}

// dialErr is the error of a dial's Result that came before its connection.
func dialErr(port int, r *proto.Result) error {
	if r == nil || r.Error == nil {
		return fmt.Errorf("%w: the dial of port %d ended before it connected", ErrProtocol, port)
	}
	switch r.Error.Kind {
	case proto.ErrRefused:
		return fmt.Errorf("%w: port %d", ErrRefused, port)
	case proto.ErrBusy:
		return fmt.Errorf("%w: %s", ErrDialBusy, r.Error.Message)
	case proto.ErrIO:
		return fmt.Errorf("%w: %s", ErrUnreachable, r.Error.Message)
	}
	return r.Error
}

// DialConn is a connection to a port in the sandbox, carried by the agent.
// Reads and writes may run concurrently with each other; Close unblocks
// both. The write deadline is not supported (Close ends a blocked Write).
type DialConn struct {
	c    *Client
	st   *stream
	port int

	rmu  sync.Mutex
	cur  chunk
	off  int
	rerr error
	rdl  deadline.Deadline

	wmu       sync.Mutex
	wclosed   bool
	closeOnce sync.Once
}

var errClosed = net.ErrClosed

// Read reads what the sandbox's server sent; io.EOF once it half-closed
// (or closed) its end.
func (d *DialConn) Read(p []byte) (int, error) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	for {
		if d.off < len(d.cur.b) {
			n := 0
			for {
				k := copy(p[n:], d.cur.b[d.off:])
				n += k
				d.off += k
				if d.off < len(d.cur.b) {
					break
				}
				d.cur.recycle()
				d.cur, d.off = chunk{}, 0
				// Fill p with what else is queued already: fewer, larger
				// writes downstream.
				if n == len(p) || !d.st.tryNextData(&d.cur) {
					break
				}
			}
			d.st.credit(n)
			return n, nil
		}
		if d.rerr != nil {
			return 0, d.rerr
		}
		if len(p) == 0 {
			return 0, nil
		}
		ch, r, err, cancelled := d.st.next(d.rdl.Done())
		switch {
		case cancelled:
			return 0, os.ErrDeadlineExceeded
		case ch.t == proto.TEOF:
			d.rerr = io.EOF
		case ch.b != nil:
			d.cur, d.off = ch, 0
		case err != nil:
			d.rerr = err
		case r != nil && r.Error != nil:
			d.rerr = fmt.Errorf("agent: port %d: %w", d.port, r.Error)
		default:
			d.rerr = io.EOF
		}
	}
}

// Write sends p to the sandbox's server within the agent's credit.
func (d *DialConn) Write(p []byte) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.wclosed {
		return 0, errClosed
	}
	n := 0
	for len(p) > 0 {
		k, ok := d.st.inCredit.take(min(len(p), proto.MaxData))
		if !ok {
			return n, errClosed
		}
		if err := d.c.send(proto.Frame{Type: proto.TData, Stream: d.st.id, Payload: p[:k]}); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseWrite half-closes the connection: the server reads its end.
func (d *DialConn) CloseWrite() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.wclosed {
		return nil
	}
	d.wclosed = true
	return d.c.send(proto.Frame{Type: proto.TEOF, Stream: d.st.id})
}

// Close ends the connection in the sandbox (the agent closes it) and
// unblocks a Read or Write in progress.
func (d *DialConn) Close() error {
	d.closeOnce.Do(func() {
		d.st.mu.Lock()
		ended := d.st.ended
		d.st.mu.Unlock()
		if !ended {
			_ = d.c.send(proto.Frame{Type: proto.TCancel, Stream: d.st.id})
		}
		d.c.forget(d.st)
		d.st.finish(nil, errClosed)
		d.rdl.Stop()
	})
	return nil
}

// Done is closed when the agent's connection ended (then every dial
// ended too).
func (d *DialConn) Done() <-chan struct{} { return d.c.done }

func (d *DialConn) LocalAddr() net.Addr  { return dialAddr("agent") }
func (d *DialConn) RemoteAddr() net.Addr { return dialAddr("127.0.0.1:" + strconv.Itoa(d.port)) }

// SetDeadline sets the read deadline (see DialConn).
func (d *DialConn) SetDeadline(t time.Time) error { return d.SetReadDeadline(t) }

// SetReadDeadline bounds Read: past it Read returns os.ErrDeadlineExceeded.
func (d *DialConn) SetReadDeadline(t time.Time) error { d.rdl.Set(t); return nil }

// SetWriteDeadline is not supported: it does nothing.
func (d *DialConn) SetWriteDeadline(time.Time) error { return nil }

type dialAddr string

func (a dialAddr) Network() string { return "agent" }
func (a dialAddr) String() string  { return string(a) }
