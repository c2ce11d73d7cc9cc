package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Errors a Client returns; each wraps the cause.
var (
	// ErrProtocol: the agent broke the protocol. Its sandbox should be
	// killed: it is no longer known what runs in it.
	ErrProtocol = proto.ErrProtocol
	// ErrUnavailable: the agent stopped answering (dead, hung, stopped) or
	// the connection ended.
	ErrUnavailable = errors.New("agent unavailable")
)

// Conn is the byte stream to one agent: reads are the agent's frames, writes
// go to it. SetWriteDeadline bounds a write to an agent that stopped reading.
type Conn interface {
	io.Reader
	io.Writer
	Close() error
	SetWriteDeadline(time.Time) error
}

// Options tune a Client.
type Options struct {
	// HelloTimeout bounds the handshake. Default 2 s.
	HelloTimeout time.Duration
	// PingInterval and PingTimeout detect a hung agent while operations
	// are in flight. Defaults 250 ms and 1 s: a hung agent fails its
	// operations within about 1.25 s, and one starved of CPU by its own
	// sandbox's load (it shares the sandbox's CPU quota) is not taken for
	// hung.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// WriteTimeout bounds one frame write. Default 5 s.
	WriteTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 2 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 250 * time.Millisecond
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	return o
}

// Client is a connection to one agent. It is safe for concurrent use.
type Client struct {
	conn  Conn
	opts  Options
	hello proto.Hello
	nonce string

	wmu  sync.Mutex
	wbuf []byte

	mu      sync.Mutex
	streams map[uint32]*stream
	nextID  uint32
	err     error
	done    chan struct{}
	pongs   chan struct{}

	lastPong atomic.Int64
	// frozen counts Freezes not yet thawed: the agent is frozen with its
	// sandbox, so its silence is not a hang.
	frozen atomic.Int32
	wg     sync.WaitGroup
}

// Dial does the handshake on conn and starts the client's reader. The
// client owns conn from here on; Close closes it.
func Dial(ctx context.Context, conn Conn, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	c := &Client{conn: conn, opts: opts, streams: make(map[uint32]*stream), done: make(chan struct{}),
		pongs: make(chan struct{}, 1)}
	br := bufio.NewReaderSize(conn, 256<<10)
	fr := proto.NewReader(br)
	h, err := c.handshake(ctx, br, fr)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	c.hello, c.nonce = h, h.Nonce
	c.wg.Add(2)
	go func() { defer c.wg.Done(); c.readLoop(fr) }()
	go func() { defer c.wg.Done(); c.keepalive() }()
	return c, nil
}

// handshake sends Sync and a Hello with a fresh nonce, and retries with
// padding (which completes any frame an earlier worker left half-written)
// until the agent's Hello carries the nonce back.
func (c *Client) handshake(ctx context.Context, br *bufio.Reader, fr *proto.Reader) (proto.Hello, error) {
	var nb [12]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	hello, _ := json.Marshal(proto.Hello{Version: proto.Version, Nonce: nonce})
	msg := append(append([]byte(nil), proto.Sync...), proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: hello})...)

	type reply struct {
		h   proto.Hello
		err error
	}
	got := make(chan reply, 1)
	go func() { // ends when the conn is closed or a reply comes
		for {
			f, err := fr.ReadFrame()
			if errors.Is(err, proto.ErrProtocol) {
				if err := proto.SkipToSync(br, proto.MaxControl); err != nil {
					continue // garbage from an earlier session: keep looking
				}
				continue
			}
			if err != nil {
				got <- reply{err: err}
				return
			}
			if f.Type != proto.THello {
				continue // frames an earlier worker's streams left behind
			}
			h, err := proto.DecodeHello(f.Payload)
			if err != nil || h.Nonce != nonce {
				continue
			}
			got <- reply{h: h}
			return
		}
	}()
	deadline := time.NewTimer(c.opts.HelloTimeout)
	defer deadline.Stop()
	retry := time.NewTicker(250 * time.Millisecond)
	defer retry.Stop()
	send := func(pad bool) error {
		b := msg
		if pad {
			b = append(make([]byte, proto.MaxControl+proto.HeaderSize), msg...)
		}
		wt := c.opts.WriteTimeout
		if c.frozen.Load() > 0 {
			wt = max(wt, frozenWriteTimeout) // the agent reads again once thawed
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(wt))
		_, err := c.conn.Write(b)
		return err
	}
	if err := send(false); err != nil {
		return proto.Hello{}, fmt.Errorf("%w: send hello: %w", ErrUnavailable, err)
	}
	for {
		select {
		case r := <-got:
			if r.err != nil {
				return proto.Hello{}, fmt.Errorf("%w: read hello: %w", ErrUnavailable, r.err)
			}
			if r.h.Version != proto.Version {
				return proto.Hello{}, fmt.Errorf("%w: agent speaks protocol %d, want %d", ErrProtocol, r.h.Version, proto.Version)
			}
			return r.h, nil
		case <-retry.C:
			if err := send(true); err != nil {
				return proto.Hello{}, fmt.Errorf("%w: send hello: %w", ErrUnavailable, err)
			}
		case <-deadline.C:
			_ = c.conn.Close() // ends the reading goroutine
			return proto.Hello{}, fmt.Errorf("%w: no hello within %s", ErrUnavailable, c.opts.HelloTimeout)
		case <-ctx.Done():
			_ = c.conn.Close()
			return proto.Hello{}, ctx.Err()
		}
	}
}

// Hello is what the agent said of itself.
func (c *Client) Hello() proto.Hello { return c.hello }

// Conn is the connection the client owns.
func (c *Client) Conn() Conn { return c.conn }

// Done is closed when the client has failed or was closed; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client ended (nil while it runs).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; operations in flight fail with ErrUnavailable.
func (c *Client) Close() error {
	c.fail(fmt.Errorf("%w: client closed", ErrUnavailable))
	c.wg.Wait()
	return nil
}

// fail ends the client once with err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*stream{}
	close(c.done)
	c.mu.Unlock()
	_ = c.conn.Close()
	for _, st := range streams {
		st.finish(nil, err)
	}
}

func (c *Client) send(f proto.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	c.wbuf = proto.AppendFrame(c.wbuf[:0], f)
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := c.conn.Write(c.wbuf); err != nil {
		err = fmt.Errorf("%w: write: %w", ErrUnavailable, err)
		go c.fail(err)
		return err
	}
	return nil
}

func (c *Client) readLoop(fr *proto.Reader) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, proto.ErrProtocol) {
				err = fmt.Errorf("%w: read: %w", ErrUnavailable, err)
			}
			c.fail(err)
			return
		}
		if err := c.dispatch(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *Client) dispatch(f proto.Frame) error {
	switch f.Type {
	case proto.TPong:
		c.lastPong.Store(time.Now().UnixNano())
		select {
		case c.pongs <- struct{}{}:
		default:
		}
		return nil
	case proto.THello:
		// A late reply to one of our handshake retries, or another
		// worker's: an attach stream is shared by every attacher, so a
		// Hello with another nonce means a newer worker took the agent
		// over (a restart while this one still ran).
		if h, err := proto.DecodeHello(f.Payload); err == nil && h.Nonce != c.nonce {
			return fmt.Errorf("%w: another worker attached to the agent", ErrUnavailable)
		}
		return nil
	case proto.TStdout, proto.TStderr, proto.TData, proto.TWindow, proto.TResult, proto.TConnected, proto.TEOF:
	default:
		return fmt.Errorf("%w: %s frame from the agent", ErrProtocol, f.Type)
	}
	c.mu.Lock()
	st := c.streams[f.Stream]
	c.mu.Unlock()
	if st == nil {
		if f.Stream == 0 || f.Stream >= c.maxID() {
			return fmt.Errorf("%w: %s frame on stream %d, never opened", ErrProtocol, f.Type, f.Stream)
		}
		return nil // a stream that ended (cancelled) meanwhile
	}
	switch f.Type {
	case proto.TWindow:
		st.inCredit.add(int64(proto.WindowCredit(f)))
		return nil
	case proto.TConnected, proto.TEOF:
		return st.dialFrame(f) // dial.go
	case proto.TResult:
		r, err := proto.DecodeResult(f.Payload)
		if err != nil {
			return err
		}
		c.mu.Lock()
		delete(c.streams, f.Stream)
		c.mu.Unlock()
		st.finish(&r, nil)
		return nil
	}
	return st.data(f)
}

func (c *Client) maxID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextID + 1
}

// frozenWriteTimeout bounds one frame write while the agent is frozen (a
// snapshot reads the sandbox's files meanwhile).
const frozenWriteTimeout = 10 * time.Minute

// Freeze tells the client that its agent is frozen with its sandbox (a
// snapshot's docker pause): no ping is judged, and writes may wait, until
// the returned thaw runs (once the sandbox runs again). Freezes nest.
func (c *Client) Freeze() (thaw func()) {
	c.frozen.Add(1)
	var once sync.Once
	return func() { once.Do(func() { c.frozen.Add(-1) }) }
}

// keepalive pings while operations are in flight; an agent that does not
// answer within PingTimeout fails the client. A ping whose write blocks (an
// agent that stopped reading) counts as unanswered. While the agent is
// frozen (Freeze) nothing is judged; a ping still being written at the
// thaw counts from the thaw.
func (c *Client) keepalive() {
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	var sent time.Time
	var pending atomic.Bool
	wasFrozen := false
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if c.frozen.Load() > 0 {
			wasFrozen = true
			continue
		}
		if wasFrozen {
			wasFrozen, sent = false, time.Time{}
			if pending.Load() {
				sent = time.Now()
			}
		}
		answered := c.lastPong.Load() >= sent.UnixNano()
		if !sent.IsZero() && !answered && time.Since(sent) > c.opts.PingTimeout {
			c.fail(fmt.Errorf("%w: no answer to a ping in %s", ErrUnavailable, time.Since(sent).Round(time.Millisecond)))
			return
		}
		c.mu.Lock()
		busy := len(c.streams) > 0
		c.mu.Unlock()
		if !busy {
			sent = time.Time{}
			continue
		}
		if (sent.IsZero() || answered) && pending.CompareAndSwap(false, true) {
			sent = time.Now()
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer pending.Store(false)
				_ = c.send(proto.Frame{Type: proto.TPing})
			}()
		}
	}
}

// Ping round-trips one ping.
func (c *Client) Ping(ctx context.Context) error {
	select {
	case <-c.pongs:
	default:
	}
	if err := c.send(proto.Frame{Type: proto.TPing}); err != nil {
		return err
	}
	select {
	case <-c.pongs:
		return nil
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// open registers a stream and sends its request.
func (c *Client) open(req proto.Request) (*stream, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(b) > proto.MaxControl {
		return nil, fmt.Errorf("agent: request of %d bytes is over the protocol's bound", len(b))
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	st := newStream(c, c.nextID)
	c.streams[st.id] = st
	c.mu.Unlock()
	if err := c.send(proto.Frame{Type: proto.TRequest, Stream: st.id, Payload: b}); err != nil {
		return nil, err
	}
	return st, nil
}

// forget drops a stream the caller no longer waits for.
func (c *Client) forget(st *stream) {
	c.mu.Lock()
	delete(c.streams, st.id)
	c.mu.Unlock()
	st.inCredit.close()
}
