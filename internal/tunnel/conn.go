package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/deadline"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Frames: every message on a connection's subject is one frame, its first
// byte the type. Data and EOF carry a 4-byte sequence number (big-endian,
// from 1, one sequence per direction): core NATS keeps one publisher's
// order but drops messages for a slow consumer, and a gap ends the
// connection instead of corrupting it.
const (
	frameAccept = 'O' // worker → gateway: events.TunnelAccept (JSON)
	frameRefuse = 'X' // worker → gateway: an error body (events.EncodeError)
	frameData   = 'D' // seq, bytes
	frameEOF    = 'E' // seq: the sender half-closed
	frameWindow = 'W' // 4-byte credit increment
	frameClose  = 'C' // the connection ended; an error body when it failed
	framePing   = 'P' // nothing sent for a while: I am alive
)

// Bounds.
const (
	// MaxChunk bounds one data frame's bytes.
	MaxChunk = 256 << 10
	// DefaultWindow is the bytes one side may send before the other grants
	// more, in each direction: what a slow reader makes its side hold.
	DefaultWindow = 512 << 10
	// MinWindow and MaxWindow bound the window a peer asks for.
	MinWindow = 64 << 10
	MaxWindow = 16 << 20
	// GrowWindow is how far a receiving end grows its window while its
	// reader keeps up and the sender is held back by credit (the window is
	// what a round trip carries: on a loaded host a round trip takes
	// milliseconds); DefaultGrowBudget bounds the growth of all of one
	// side's connections together.
	GrowWindow        = 8 << 20
	DefaultGrowBudget = 256 << 20
	// maxCredit bounds the credit a peer may grant in all (a hostile peer's
	// overflow).
	maxCredit = 1 << 30
)

// Errors a connection's Read or Write return, besides the SBX errors a
// peer's close carries.
var (
	// ErrPeerLost: nothing came from the other end within the dead bound
	// (its process or its NATS connection died).
	ErrPeerLost = errors.New("tunnel: the other end stopped answering")
	// ErrIdle: nothing was carried either way within the idle bound.
	ErrIdle = errors.New("tunnel: the connection was idle too long")
	// ErrBroken: a frame was lost or malformed (a slow consumer's drop).
	ErrBroken = errors.New("tunnel: the connection lost a frame")
	// errWriteClosed: a Write after CloseWrite.
	errWriteClosed = errors.New("tunnel: write after CloseWrite")
	// errPeerClosed: a Write after the other end closed.
	errPeerClosed = errors.New("tunnel: the other end closed the connection")
)

// Conn is one end of a tunnelled connection: a net.Conn whose bytes cross
// core NATS in frames, within credit windows both ways. CloseWrite
// half-closes it.
type Conn struct {
	nc     *nats.Conn
	id     string // own connection id: the key in its table
	window int    // what this end lets the other send unread
	local  net.Addr
	remote net.Addr
	table  *table

	peer atomic.Pointer[string] // the subject frames go to; set once accepted

	mu       sync.Mutex
	rq       [][]byte // received, not yet read
	rbytes   int
	rseq     uint32
	rEOF     bool
	consumed int // read and not yet credited back
	// peerCredit is what the other end may still send: the window less
	// what it sent unread or unacknowledged.
	peerCredit int
	grown      int // of window, taken from the table's budget
	credit     int // what this end may still send
	closed     bool
	rerr       error // what Read returns once the received bytes are read
	werr       error
	rwake      chan struct{}
	wwake      chan struct{}
	done       chan struct{}

	wmu  sync.Mutex
	sseq uint32
	wEOF bool
	wbuf []byte

	lastRecv atomic.Int64 // unix ns of the last frame received
	lastSend atomic.Int64 // of the last frame sent
	lastData atomic.Int64 // of the last bytes carried either way

	rdl, wdl deadline.Deadline
}

func newConn(nc *nats.Conn, t *table, id string, window int, local, remote net.Addr) *Conn {
	now := time.Now().UnixNano()
	c := &Conn{nc: nc, table: t, id: id, window: window, peerCredit: window, local: local, remote: remote,
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1), done: make(chan struct{})}
	c.rdl.Init()
	c.wdl.Init()
	c.lastRecv.Store(now)
	c.lastSend.Store(now)
	c.lastData.Store(now)
	return c
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// publish sends one frame to the peer.
func (c *Conn) publish(b []byte) error {
	p := c.peer.Load()
	if p == nil {
		return errPeerClosed
	}
	c.lastSend.Store(time.Now().UnixNano())
	return c.nc.Publish(*p, b)
}

// Read reads what the other end sent.
func (c *Conn) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		if c.rbytes > 0 {
			n := 0
			for n < len(p) && len(c.rq) > 0 {
				k := copy(p[n:], c.rq[0])
				n += k
				if k == len(c.rq[0]) {
					c.rq[0] = nil
					c.rq = c.rq[1:]
				} else {
					c.rq[0] = c.rq[0][k:]
				}
			}
			c.rbytes -= n
			c.consumed += n
			grant := 0
			if c.consumed >= c.window/4 && !c.closed {
				grant = c.grantLocked()
			}
			c.mu.Unlock()
			c.lastData.Store(time.Now().UnixNano())
			c.sendGrant(grant)
			return n, nil
		}
		if c.rEOF {
			c.mu.Unlock()
			return 0, io.EOF
		}
		if c.closed {
			err := c.rerr
			c.mu.Unlock()
			return 0, err
		}
		// Nothing to read: what was read is credited back now, and a
		// sender held back by credit gets a larger window.
		grant := 0
		if c.peerCredit < c.window/4 {
			grant = c.grantLocked()
		}
		c.mu.Unlock()
		c.sendGrant(grant)
		if len(p) == 0 {
			return 0, nil
		}
		select {
		case <-c.rwake:
		case <-c.done:
		case <-c.rdl.Done():
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// grantLocked returns the credit to grant now (what was read, and the
// window's growth when the sender is nearly out of credit and the budget
// allows), and counts it as the other end's; c.mu is held.
func (c *Conn) grantLocked() int {
	grant := c.consumed
	c.consumed = 0
	if c.peerCredit+grant < c.window/4 && c.window < GrowWindow && c.table.grow(int64(c.window)) {
		grant += c.window
		c.grown += c.window
		c.window *= 2
	}
	c.peerCredit += grant
	return grant
}

// sendGrant sends a credit increment, if any.
func (c *Conn) sendGrant(n int) {
	if n <= 0 {
		return
	}
	var b [5]byte
	b[0] = frameWindow
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	if err := c.publish(b[:]); err != nil {
		c.abort(fmt.Errorf("tunnel: grant credit: %w", err), true)
	}
}

// Write sends p within the other end's credit, blocking while there is
// none (the other end reads slowly).
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		k, err := c.takeCredit(len(p))
		if err != nil {
			return n, err
		}
		c.wbuf = append(c.wbuf[:0], frameData, 0, 0, 0, 0)
		c.wbuf = append(c.wbuf, p[:k]...)
		if err := c.sendData(c.wbuf); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// writeFramed is Write of buf[5:] without a copy: buf[:5] is room for a
// frame's header (and the bytes before each later frame's data are
// overwritten with its header once sent).
func (c *Conn) writeFramed(buf []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, total := 0, len(buf)-5
	for n < total {
		k, err := c.takeCredit(total - n)
		if err != nil {
			return n, err
		}
		f := buf[n : n+5+k]
		f[0] = frameData
		if err := c.sendData(f); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// takeCredit waits for credit and takes up to max bytes of it (at most
// MaxChunk); c.wmu is held.
func (c *Conn) takeCredit(max int) (int, error) {
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			err := c.werr
			c.mu.Unlock()
			return 0, err
		case c.wEOF:
			c.mu.Unlock()
			return 0, errWriteClosed
		case c.credit > 0:
			k := min(c.credit, max, MaxChunk)
			c.credit -= k
			c.mu.Unlock()
			return k, nil
		}
		c.mu.Unlock()
		select {
		case <-c.wwake:
		case <-c.done:
		case <-c.wdl.Done():
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// sendData numbers and publishes a data frame (f[0] is frameData, f[1:5]
// the room for its sequence); c.wmu is held.
func (c *Conn) sendData(f []byte) error {
	c.sseq++
	binary.BigEndian.PutUint32(f[1:5], c.sseq)
	if err := c.publish(f); err != nil {
		c.abort(fmt.Errorf("tunnel: send: %w", err), false)
		return err
	}
	c.lastData.Store(time.Now().UnixNano())
	return nil
}

// CloseWrite half-closes the connection: the other end reads io.EOF once it
// has read everything sent before.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.closed || c.wEOF {
		c.mu.Unlock()
		return nil
	}
	c.wEOF = true
	c.mu.Unlock()
	c.sseq++
	var b [5]byte
	b[0] = frameEOF
	binary.BigEndian.PutUint32(b[1:], c.sseq)
	return c.publish(b[:])
}

// Close ends the connection both ways and tells the other end.
func (c *Conn) Close() error {
	c.finish(net.ErrClosed, net.ErrClosed, nil, true)
	return nil
}

// abort ends the connection with err: Read and Write return it, and the
// other end is told (with err's SBX code, when tell).
func (c *Conn) abort(err error, tell bool) {
	var body []byte
	if tell {
		body = events.EncodeError(events.AsError(err))
	}
	c.finish(err, err, body, tell)
}

// finish ends the connection once; with tell, a close frame (with body)
// goes to the other end.
func (c *Conn) finish(rerr, werr error, body []byte, tell bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.rerr, c.werr = true, rerr, werr
	close(c.done)
	grown := c.grown
	c.grown = 0
	c.mu.Unlock()
	c.table.shrink(int64(grown))
	c.rdl.Stop()
	c.wdl.Stop()
	if tell {
		_ = c.publish(append([]byte{frameClose}, body...))
	}
	c.table.remove(c)
}

// Done is closed once the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// handle takes one frame from the other end. It never blocks: what it
// queues is bounded by the window this end granted.
func (c *Conn) handle(b []byte) {
	c.lastRecv.Store(time.Now().UnixNano())
	if len(b) == 0 {
		return
	}
	switch b[0] {
	case framePing:
	case frameAccept, frameRefuse:
		// An answer to an open that was answered already: the worker's
		// refusal of a replayed open goes to the same subject.
	case frameData, frameEOF:
		if len(b) < 5 || (b[0] == frameEOF && len(b) != 5) || (b[0] == frameData && len(b) == 5) || len(b) > 5+MaxChunk {
			c.abort(fmt.Errorf("%w: a malformed frame", ErrBroken), true)
			return
		}
		seq := binary.BigEndian.Uint32(b[1:5])
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		if seq != c.rseq+1 || c.rEOF {
			c.mu.Unlock()
			c.abort(fmt.Errorf("%w: frame %d after %d", ErrBroken, seq, c.rseq), true)
			return
		}
		c.rseq = seq
		if b[0] == frameEOF {
			c.rEOF = true
		} else {
			if len(b)-5 > c.peerCredit {
				c.mu.Unlock()
				c.abort(fmt.Errorf("%w: the other end sent past its window", ErrBroken), true)
				return
			}
			c.rq = append(c.rq, b[5:]) // NATS gives each message its own bytes
			c.rbytes += len(b) - 5
			c.peerCredit -= len(b) - 5
			c.lastData.Store(time.Now().UnixNano())
		}
		c.mu.Unlock()
		wake(c.rwake)
	case frameWindow:
		if len(b) != 5 {
			c.abort(fmt.Errorf("%w: a malformed frame", ErrBroken), true)
			return
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		c.mu.Lock()
		if c.credit+n > maxCredit {
			c.mu.Unlock()
			c.abort(fmt.Errorf("%w: the other end granted too much credit", ErrBroken), true)
			return
		}
		c.credit += n
		c.mu.Unlock()
		wake(c.wwake)
	case frameClose:
		if e := events.DecodeError(b[1:]); e != nil {
			c.finish(e, e, nil, false)
			return
		}
		// A clean close: what was sent is read, then the end.
		c.finish(io.EOF, errPeerClosed, nil, false)
	default:
		c.abort(fmt.Errorf("%w: frame type %d", ErrBroken, b[0]), true)
	}
}

// LocalAddr and RemoteAddr name the tunnel's ends.
func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.Set(t)
	c.wdl.Set(t)
	return nil
}

// SetReadDeadline bounds Read: past it, os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error { c.rdl.Set(t); return nil }

// SetWriteDeadline bounds Write's wait for credit.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wdl.Set(t); return nil }

// Addr is a tunnel end's address.
type Addr struct{ Name string }

func (a Addr) Network() string { return "sbx-tunnel" }
func (a Addr) String() string  { return a.Name }

// table holds one side's connections by id, and keeps them alive: a ping
// where nothing was sent for a while, an end for those that heard nothing
// within dead or carried nothing within idle.
type table struct {
	mu    sync.Mutex
	conns map[string]*Conn
	// grown is what the connections' windows grew by, within budget.
	grown  atomic.Int64
	budget int64
}

func newTable(budget int64) *table { return &table{conns: make(map[string]*Conn), budget: budget} }

// grow takes n bytes of window growth from the budget.
func (t *table) grow(n int64) bool {
	if t.grown.Add(n) > t.budget {
		t.grown.Add(-n)
		return false
	}
	return true
}

func (t *table) shrink(n int64) { t.grown.Add(-n) }

func (t *table) get(id string) *Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns[id]
}

func (t *table) add(c *Conn) {
	t.mu.Lock()
	t.conns[c.id] = c
	t.mu.Unlock()
}

func (t *table) remove(c *Conn) {
	t.mu.Lock()
	if t.conns[c.id] == c {
		delete(t.conns, c.id)
	}
	t.mu.Unlock()
}

func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

func (t *table) all() []*Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Conn, 0, len(t.conns))
	for _, c := range t.conns {
		out = append(out, c)
	}
	return out
}

// sweep pings and ends connections as of now.
func (t *table) sweep(now time.Time, ping, dead, idle time.Duration) {
	n := now.UnixNano()
	for _, c := range t.all() {
		if c.peer.Load() == nil {
			continue // an open in progress: bounded by its own timeout
		}
		switch {
		case n-c.lastRecv.Load() > int64(dead):
			c.abort(fmt.Errorf("%w: nothing for %s", ErrPeerLost, time.Duration(n-c.lastRecv.Load()).Round(time.Millisecond)), true)
		case idle > 0 && n-c.lastData.Load() > int64(idle):
			c.abort(ErrIdle, true)
		case n-c.lastSend.Load() >= int64(ping):
			_ = c.publish([]byte{framePing})
		}
	}
}

// closeAll ends every connection with err.
func (t *table) closeAll(err error) {
	for _, c := range t.all() {
		c.abort(err, true)
	}
}

// keepalive runs sweep every ping until stop is closed.
func (t *table) keepalive(stop <-chan struct{}, ping, dead, idle time.Duration) {
	tick := time.NewTicker(ping / 2)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			t.sweep(now, ping, dead, idle)
		}
	}
}

// dispatch hands a message on a side's connection subject to its
// connection (the last token is the id).
func (t *table) dispatch(m *nats.Msg) *Conn {
	i := len(m.Subject) - 1
	for i >= 0 && m.Subject[i] != '.' {
		i--
	}
	return t.get(m.Subject[i+1:])
}

// newID is a random tunnel id (events.ValidTunnelID).
func newID() string {
	var b [16]byte
	_, _ = randRead(b[:])
	const hex = "0123456789abcdef"
	out := make([]byte, 32)
	for i, x := range b {
		out[2*i], out[2*i+1] = hex[x>>4], hex[x&15]
	}
	return string(out)
}
