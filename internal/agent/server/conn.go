package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Config configures a Server.
type Config struct {
	// Build names the agent's build in its Hello.
	Build string
	// Env is the start environment every exec's env is laid over.
	Env []string
	// Dir is the default working directory.
	Dir string
	Log *slog.Logger
	// Retain is how many bytes of each output stream of an exec are kept
	// for a worker that re-attaches; default DefaultRetain.
	Retain int
	// ChildTimerSlack is the timer slack (ns) of the processes the agent
	// starts, when its own threads run with another (timerslack.Relax); 0
	// leaves them the starting thread's.
	ChildTimerSlack int
	// DetachWindow is how long a finished exec waits for a worker to
	// attach and take its Result; default DefaultDetachWindow.
	DetachWindow time.Duration
}

// Server serves the protocol. One Server serves one connection at a time;
// processes outlive a connection.
type Server struct {
	cfg   Config
	files *Files
	procs *reaper
	table table
	// dirStable: cfg.Dir is the agent's working directory and cannot be
	// replaced, so a process started there inherits it (stableDir).
	dirStable bool
	// testPanic, when set (tests), runs at the start of every request's
	// handler.
	testPanic func(op string)
	// maxDials, when set (tests), replaces MaxDials.
	maxDials int
}

// New makes a server and starts its reaper.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Retain <= 0 {
		cfg.Retain = DefaultRetain
	}
	if cfg.DetachWindow <= 0 {
		cfg.DetachWindow = DefaultDetachWindow
	}
	files, err := NewFiles()
	if err != nil {
		return nil, fmt.Errorf("sbx-agent: open root: %w", err)
	}
	r, err := startReaper()
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, files: files, procs: r, dirStable: stableDir(cfg.Dir)}, nil
}

// conn is one served connection.
type conn struct {
	s   *Server
	out *sender

	mu      sync.Mutex
	streams map[uint32]*stream
	wg      sync.WaitGroup
	// dials counts the dials in flight (maxDials).
	dials atomic.Int64
}

// sender writes frames, one at a time, assigning sequence numbers.
type sender struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// errConnEnded fails the sends of a connection that ended.
var errConnEnded = errors.New("connection ended")

// close fails every later send; it waits for a send in progress, so that
// nothing of this connection is written after it returns.
func (s *sender) close() {
	s.mu.Lock()
	if s.err == nil {
		s.err = errConnEnded
	}
	s.mu.Unlock()
}

func (s *sender) send(f proto.Frame, seq *uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if seq != nil {
		*seq++
		f.Seq = *seq
	}
	s.buf = proto.AppendFrame(s.buf[:0], f)
	_, s.err = s.w.Write(s.buf)
	if cap(s.buf) > 8*(proto.MaxData+proto.HeaderSize) {
		s.buf = nil
	}
	return s.err
}

// sendData sends p as data frames of at most proto.MaxData, in one write.
func (s *sender) sendData(t proto.Type, stream uint32, p []byte, seq *uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.buf = s.buf[:0]
	for len(p) > 0 {
		n := min(len(p), proto.MaxData)
		*seq++
		s.buf = proto.AppendFrame(s.buf, proto.Frame{Type: t, Stream: stream, Seq: *seq, Payload: p[:n]})
		p = p[n:]
	}
	_, s.err = s.w.Write(s.buf)
	return s.err
}

func (s *sender) json(t proto.Type, stream uint32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.send(proto.Frame{Type: t, Stream: stream, Payload: b}, nil)
}

// Serve serves one connection until it ends or ctx is done. With sync, the
// reader first skips to proto.Sync (a byte stream an earlier worker may have
// left mid-frame), and a protocol error (a new worker's Sync, or garbage)
// ends the connection so far and waits for the next Sync: a new connection
// on the same byte stream. When a connection ends, execs with a mark are
// detached (a later connection may attach to them) and everything else it
// runs is cancelled.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer, sync bool) error {
	br := bufio.NewReaderSize(r, 256<<10)
	fr := proto.NewReader(br)
	for {
		if sync {
			if err := proto.SkipToSync(br, 64<<20); err != nil {
				return err
			}
		}
		c := &conn{s: s, out: &sender{w: w}, streams: make(map[uint32]*stream)}
		err := c.loop(ctx, fr)
		c.closeAll()
		if !errors.Is(err, proto.ErrProtocol) || !sync {
			return err
		}
		s.cfg.Log.Warn("protocol error: waiting for the next sync", "err", err)
	}
}

func (c *conn) loop(ctx context.Context, fr *proto.Reader) (err error) {
	// A frame the agent fails to handle ends this connection as a protocol
	// error would: the next Sync starts a new one.
	defer c.s.recovered("a frame", func(*proto.Error) {
		err = fmt.Errorf("%w: the agent failed handling a frame", proto.ErrProtocol)
	})
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := c.handle(ctx, f); err != nil {
			return err
		}
	}
}

func (c *conn) handle(ctx context.Context, f proto.Frame) error {
	switch f.Type {
	case proto.THello:
		h, err := proto.DecodeHello(f.Payload)
		if err != nil {
			return err
		}
		return c.out.json(proto.THello, 0, proto.Hello{Version: proto.Version, Nonce: h.Nonce, Agent: c.s.cfg.Build,
			PID: os.Getpid(), UID: os.Getuid(), GID: os.Getgid(), Procs: runtime.GOMAXPROCS(0),
			Features: []string{proto.FeatureDial}})
	case proto.TPing:
		return c.out.send(proto.Frame{Type: proto.TPong, Payload: f.Payload}, nil)
	case proto.TRequest:
		req, err := proto.DecodeRequest(f.Payload)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if _, dup := c.streams[f.Stream]; dup || len(c.streams) >= maxStreams {
			c.mu.Unlock()
			return fmt.Errorf("%w: stream %d reused or too many streams", proto.ErrProtocol, f.Stream)
		}
		st := newStream(c, f.Stream)
		if req.Op == proto.OpDial {
			st.outCredit = newCredit(dialWindow)
		}
		c.streams[f.Stream] = st
		c.mu.Unlock()
		switch req.Op {
		case proto.OpExec:
			c.startExec(ctx, st, req)
			return nil
		case proto.OpAttach:
			c.attach(st, req)
			return nil
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.runGuarded(ctx, st, req)
			c.mu.Lock()
			delete(c.streams, st.id)
			c.mu.Unlock()
		}()
		return nil
	}
	c.mu.Lock()
	st := c.streams[f.Stream]
	c.mu.Unlock()
	if st == nil {
		return nil // a stream that ended meanwhile
	}
	switch f.Type {
	case proto.TWindow:
		st.outCredit.add(int64(proto.WindowCredit(f)))
	case proto.TStdin, proto.TData:
		if !st.in.push(f.Payload) {
			return fmt.Errorf("%w: stream %d sent past its window", proto.ErrProtocol, f.Stream)
		}
	case proto.TEOF:
		st.in.closeEOF()
	case proto.TSignal:
		var sg proto.Signal
		if json.Unmarshal(f.Payload, &sg) != nil || sg.Signal <= 0 || sg.Signal > 64 {
			return fmt.Errorf("%w: bad signal", proto.ErrProtocol)
		}
		st.signal(sg)
	case proto.TCancel:
		st.cancel()
	case proto.TResize:
		var rs proto.Resize
		if json.Unmarshal(f.Payload, &rs) == nil {
			st.resize(rs)
		}
	default:
		return fmt.Errorf("%w: %s frame from the worker", proto.ErrProtocol, f.Type)
	}
	return nil
}

// maxStreams bounds a connection's streams: room for maxDials dials and
// as many other operations.
const maxStreams = 2 * MaxDials

// closeAll ends the connection: nothing more is sent on it; an exec with a
// mark is detached, every other stream cancelled and waited for.
func (c *conn) closeAll() {
	c.out.close()
	c.mu.Lock()
	var detached []*stream
	for _, st := range c.streams {
		if st.proc == nil || !st.proc.detachable {
			st.cancel()
		}
		st.in.close()
		st.outCredit.close()
		if st.proc != nil {
			detached = append(detached, st)
		}
	}
	c.mu.Unlock()
	for _, st := range detached {
		st.proc.dropConn(c)
	}
	c.wg.Wait()
}

// ended forgets a stream whose Result was sent.
func (c *conn) ended(st *stream) {
	c.mu.Lock()
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
	c.mu.Unlock()
}

// startExec starts an exec on st. Its goroutine is not the connection's:
// with a mark it outlives it.
func (c *conn) startExec(ctx context.Context, st *stream, req proto.Request) {
	p := newProc(req.Mark, c.s.cfg.Retain)
	if p.detachable && !c.s.table.add(p) {
		p.detachable = false // the mark runs already: this one is not re-attachable
	}
	st.proc = p
	p.bind(st)
	p.mu.Lock()
	p.setLocked(&attachment{c: c, st: st})
	p.mu.Unlock()
	go func() {
		defer c.s.recovered("exec result", nil)
		r := c.s.execGuarded(ctx, p, st, req)
		p.mu.Lock()
		p.exit = r.Exit
		p.wakeLocked()
		p.mu.Unlock()
		if p.detachable {
			c.s.table.finish(p)
		}
		if !p.deliver(r, c.s.cfg.DetachWindow) {
			p.abandon()
			c.s.table.forget(p)
		}
	}()
}

// execGuarded runs an exec; a panic in it is its Result's internal error,
// with an exit that says Killed when the process had started (exec killed
// its tree).
func (s *Server) execGuarded(ctx context.Context, p *proc, st *stream, req proto.Request) (r proto.Result) {
	var aborted bool
	defer s.recovered(proto.OpExec, func(e *proto.Error) {
		r = proto.Result{Exit: &proto.Exit{Code: 126, Killed: aborted}, Error: e}
	})
	if s.testPanic != nil {
		s.testPanic(req.Op)
	}
	return proto.Result{Exit: s.exec(ctx, p, st, req, &aborted)}
}

// attach re-attaches st to the exec with req's mark, from the offsets the
// worker stored. An exec this agent does not have (never ran, forgotten)
// or whose output from there is no longer kept is answered ErrLost.
func (c *conn) attach(st *stream, req proto.Request) {
	p := c.s.table.get(req.Mark)
	fail := func(msg string) {
		_ = c.out.json(proto.TResult, st.id, proto.Result{Error: &proto.Error{Kind: proto.ErrLost, Message: msg}})
		c.ended(st)
	}
	if p == nil {
		fail("no process " + req.Mark)
		return
	}
	p.mu.Lock()
	from := [2]int64{req.OutFrom, req.ErrFrom}
	for i, o := range from {
		if o < p.logs[i].start() || o > p.logs[i].end {
			p.mu.Unlock()
			fail(fmt.Sprintf("process %s: output from offset %d is no longer kept (%d to %d are)", req.Mark, o, p.logs[i].start(), p.logs[i].end))
			return
		}
	}
	old := p.att
	st.proc = p
	p.setLocked(&attachment{c: c, st: st, cursor: from})
	p.mu.Unlock()
	if old != nil {
		// A connection that is still there (two workers on one agent):
		// its stream ends without a Result.
		old.st.outCredit.close()
	}
	p.bind(st)
}

// runGuarded runs a request; a panic in it is answered as an internal
// error.
func (c *conn) runGuarded(ctx context.Context, st *stream, req proto.Request) {
	defer c.s.recovered(req.Op, func(e *proto.Error) { c.result(st, proto.Result{Error: e}) })
	if c.s.testPanic != nil {
		c.s.testPanic(req.Op)
	}
	c.run(ctx, st, req)
}

func (c *conn) result(st *stream, r proto.Result) {
	_ = c.out.json(proto.TResult, st.id, r)
}

func (c *conn) run(ctx context.Context, st *stream, req proto.Request) {
	switch req.Op {
	case proto.OpRead:
		w := &dataWriter{c: c, st: st}
		n, e := c.s.files.Read(req.Path, req.Max, w)
		c.result(st, proto.Result{Bytes: n, Error: e})
	case proto.OpWrite:
		n, e := c.s.files.Write(req.Path, req.Mode, req.Parents, &dataReader{c: c, st: st}, req.Size)
		c.result(st, proto.Result{Bytes: n, Error: e})
	case proto.OpList:
		files, self, truncated, e := c.s.files.List(req.Path)
		r := proto.Result{Files: files, Stat: self, Error: e}
		if truncated {
			r.Count = 1
		}
		c.result(st, r)
	case proto.OpStat:
		fi, e := c.s.files.Stat(req.Path)
		r := proto.Result{Error: e}
		if e == nil {
			r.Stat = &fi
		}
		c.result(st, r)
	case proto.OpMkdir:
		c.result(st, proto.Result{Error: c.s.files.Mkdir(req.Path, req.Mode, req.Parents)})
	case proto.OpRemove:
		c.result(st, proto.Result{Error: c.s.files.Remove(req.Path)})
	case proto.OpOOM:
		n, e := OOMKills()
		c.result(st, proto.Result{Count: n, Error: e})
	case proto.OpWatch:
		cancel := make(chan struct{})
		var once sync.Once
		stop := func() { once.Do(func() { close(cancel) }) }
		st.mu.Lock()
		st.onCancel = stop
		cancelled := st.canceled
		st.mu.Unlock()
		if cancelled {
			stop()
		}
		w, e := c.s.files.Watch(req.Path, time.Duration(req.TimeoutMS)*time.Millisecond, int(req.Max), cancel)
		c.result(st, proto.Result{Events: w.Events, Count: w.Count(), Dropped: int64(w.Dropped), Error: e})
	case proto.OpKill:
		n := KillMarked(req.Mark)
		c.result(st, proto.Result{Count: int64(n)})
	case proto.OpDial:
		c.dial(st, req)
	}
}

// dataWriter sends file content as data frames within the stream's credit.
type dataWriter struct {
	c  *conn
	st *stream
}

func (w *dataWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k, ok := w.st.outCredit.take(min(len(p), proto.MaxData))
		if !ok {
			return n, errors.New("stream closed")
		}
		if err := w.c.out.send(proto.Frame{Type: proto.TData, Stream: w.st.id, Payload: p[:k]}, &w.st.seq); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// dataReader reads file content the worker sends, granting credit as it goes.
type dataReader struct {
	c    *conn
	st   *stream
	cur  []byte
	done bool
}

func (r *dataReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.done {
			return 0, io.EOF
		}
		b, ok := r.st.in.pop()
		if !ok {
			r.done = true
			return 0, io.EOF
		}
		r.cur = b
		_ = r.c.out.send(proto.Frame{Type: proto.TWindow, Stream: r.st.id, Payload: proto.WindowPayload(uint32(len(b)))}, nil)
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
