package server

import (
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// The process table (ADR 18). An exec that carries a mark (its process id)
// outlives the connection that started it: when the connection ends, the
// exec is detached, not killed. Its output goes through a bounded log per
// stream kept at absolute byte offsets, so that a later connection's attach
// request (a restarted worker) can pick it up at the offsets the worker had
// stored: the agent replays the log from there, then the live output, then
// the Result. An exec without a mark is killed with its connection, as
// before.

// DefaultRetain is how many bytes of each output stream of an exec the agent
// keeps for replay. A worker can have at most its credit window (1 MiB) in
// flight plus what it has received and not yet stored (its chunk and publish
// window: 128 KiB + 32 × 128 KiB by default), so 6 MiB covers a worker that
// died at any moment; the memory is only used by an exec that writes that
// much.
const DefaultRetain = 6 << 20

// deliveredRetain is what a finished exec keeps of each output stream once
// its Result went out: the worker then has all of it, and what it may not
// have stored yet is its publish window, which drains within milliseconds on
// a healthy bus.
const deliveredRetain = 1 << 20

// DefaultDetachWindow is how long a finished exec's Result and output wait
// for a worker to attach when none is (a detached exec whose worker did not
// come back): then they are freed and its table entry forgotten.
const DefaultDetachWindow = 10 * time.Minute

// maxFinished and finishedBudget bound the finished execs kept for a worker
// that has not re-attached yet (their exit status and output logs): at most
// 8, and their logs at most 16 MiB together (the newest is always kept).
const (
	maxFinished    = 8
	finishedBudget = 16 << 20
)

// outlog is at least the last retain bytes of one output stream (at most a
// chunk more), at absolute offsets, in chunks: memory follows what is kept,
// and dropping the oldest frees it.
type outlog struct {
	retain int
	chunks [][]byte // consecutive, oldest first
	first  int64    // offset of chunks[0][0]
	end    int64    // offset past the last byte written
	size   int
}

// logChunk is the allocation unit of a log.
const logChunk = 64 << 10

// logChunks recycles the chunks a streaming exec's log drops as it goes: a
// log that keeps the last 6 MiB of a 64 MiB stream would otherwise allocate
// all 64 MiB, and the agent's small heap would collect every few chunks.
var logChunks = sync.Pool{New: func() any { b := make([]byte, 0, logChunk); return &b }}

func (l *outlog) start() int64 { return l.first }

func (l *outlog) append(p []byte) {
	l.end += int64(len(p))
	l.size += len(p)
	for len(p) > 0 {
		n := len(l.chunks)
		if n == 0 || len(l.chunks[n-1]) == cap(l.chunks[n-1]) {
			l.chunks = append(l.chunks, (*logChunks.Get().(*[]byte))[:0])
			n++
		}
		last := l.chunks[n-1]
		k := min(len(p), cap(last)-len(last))
		l.chunks[n-1] = append(last, p[:k]...)
		p = p[k:]
	}
	l.trim(l.retain, true)
}

// trim drops the oldest chunks while at least keep bytes remain; recycled,
// they go back to logChunks for the next append (the log's own or another
// exec's), else to the garbage collector. Nothing outside the log refers to
// a chunk: read copies out of them under the proc's lock, as trim runs.
func (l *outlog) trim(keep int, recycle bool) {
	for len(l.chunks) > 0 && l.size-len(l.chunks[0]) >= keep {
		c := l.chunks[0]
		l.first += int64(len(c))
		l.size -= len(c)
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		if recycle && cap(c) == logChunk {
			logChunks.Put(&c)
		}
	}
	if len(l.chunks) == 0 {
		l.chunks = nil
	}
}

// bytes is the memory the log holds.
func (l *outlog) bytes() int { return len(l.chunks) * logChunk }

// read copies up to len(dst) bytes from offset from (start ≤ from ≤ end)
// into dst.
func (l *outlog) read(from int64, dst []byte) []byte {
	n := int(min(int64(len(dst)), l.end-from))
	if n <= 0 || from < l.first {
		return dst[:0]
	}
	off := from - l.first
	got := 0
	for _, c := range l.chunks {
		if off >= int64(len(c)) {
			off -= int64(len(c))
			continue
		}
		got += copy(dst[got:n], c[off:])
		off = 0
		if got == n {
			break
		}
	}
	return dst[:got]
}

// attachment is the connection stream an exec's output currently goes to,
// and how far each output stream has been sent on it.
type attachment struct {
	c      *conn
	st     *stream
	cursor [2]int64
}

// proc is one exec's entry.
type proc struct {
	mark       string
	detachable bool

	mu        sync.Mutex
	att       *attachment
	changed   chan struct{} // closed when att changes or the exec is abandoned
	abandoned bool          // detached and not detachable: nobody will attach
	logs      [2]outlog
	exit      *proto.Exit

	// Control of the running process, set once it started; cancelled
	// records a cancel that came before.
	cancelled bool
	onCancel  func()
	onSignal  func(proto.Signal)
	onResize  func(proto.Resize)
	// resized is a resize that came before the PTY was there, applied
	// when it is.
	resized *proto.Resize
	// stdinDone says the process's stdin is closed (it exited).
	stdinDone bool
}

func newProc(mark string, retain int) *proc {
	p := &proc{mark: mark, detachable: mark != "", changed: make(chan struct{})}
	p.logs[0].retain, p.logs[1].retain = retain, retain
	return p
}

// setLocked changes the attachment and wakes whoever waits for one.
func (p *proc) setLocked(a *attachment) {
	p.att = a
	p.wakeLocked()
}

// wakeLocked wakes whoever waits for a change of the proc's state.
func (p *proc) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// abandonDetached abandons the exec unless a worker is attached (one that
// attached as the detach window closed gets the Result); true when it is
// abandoned.
func (p *proc) abandonDetached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.att != nil && !p.abandoned {
		return false
	}
	p.abandonLocked()
	return true
}

// abandon gives up on delivering: nobody will take the Result.
func (p *proc) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandonLocked()
}

// abandonLocked stops whatever still waits for an attachment, and frees the
// logs.
func (p *proc) abandonLocked() {
	p.abandoned = true
	p.logs[0].trim(0, false)
	p.logs[1].trim(0, false)
	p.wakeLocked()
}

// lost drops a, the current attachment, after a send on it failed or its
// connection ended. An exec that cannot be re-attached is abandoned.
func (p *proc) lost(a *attachment) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.att != a || a == nil {
		return
	}
	if !p.detachable {
		p.abandoned = true
	}
	p.setLocked(nil)
}

// dropConn drops the attachment if it is on c, a connection that ended.
func (p *proc) dropConn(c *conn) {
	p.mu.Lock()
	a := p.att
	p.mu.Unlock()
	if a != nil && a.c == c {
		p.lost(a)
	}
}

// attached returns the current attachment (nil: none now); gone when the
// exec was abandoned.
func (p *proc) attached() (a *attachment, gone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.att, p.abandoned
}

// waitAttached returns the current attachment, waiting for one until
// deadline; nil when the exec was abandoned or the deadline passed first.
func (p *proc) waitAttached(deadline time.Time) *attachment {
	for {
		p.mu.Lock()
		a, ch, gone := p.att, p.changed, p.abandoned
		p.mu.Unlock()
		if gone {
			return nil
		}
		if a != nil {
			return a
		}
		if !waitUntil(ch, deadline) {
			return nil
		}
	}
}

// waitUntil waits for ch to close until deadline; false when the deadline
// came first.
func waitUntil(ch <-chan struct{}, deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// flush sends what the log holds past a's cursor for output stream i, within
// a's credit; false when a failed (it is then dropped).
func (p *proc) flush(a *attachment, i int, t proto.Type, buf []byte) bool {
	for {
		p.mu.Lock()
		cur, end := a.cursor[i], p.logs[i].end
		p.mu.Unlock()
		if cur >= end {
			return true
		}
		k, ok := a.st.outCredit.take(int(min(end-cur, int64(len(buf)))))
		if !ok {
			p.lost(a)
			return false
		}
		p.mu.Lock()
		b := p.logs[i].read(cur, buf[:k])
		a.cursor[i] = cur + int64(len(b))
		p.mu.Unlock()
		if len(b) < k {
			a.st.outCredit.add(int64(k - len(b)))
		}
		if a.c.out.sendData(t, a.st.id, b, &a.st.seq) != nil {
			p.lost(a)
			return false
		}
	}
}

// bind makes st the exec's stream: its cancel, signal and resize frames
// reach the process.
func (p *proc) bind(st *stream) {
	st.mu.Lock()
	st.onCancel = p.cancel
	st.onSignal = p.signal
	st.onResize = p.resize
	cancelled := st.canceled
	st.mu.Unlock()
	if cancelled {
		p.cancel()
	}
}

func (p *proc) cancel() {
	p.mu.Lock()
	p.cancelled = true
	f := p.onCancel
	p.mu.Unlock()
	if f != nil {
		f()
	}
}

func (p *proc) signal(sg proto.Signal) {
	p.mu.Lock()
	f := p.onSignal
	p.mu.Unlock()
	if f != nil {
		f(sg)
	}
}

func (p *proc) resize(r proto.Resize) {
	p.mu.Lock()
	f := p.onResize
	if f == nil {
		p.resized = &r
	}
	p.mu.Unlock()
	if f != nil {
		f(r)
	}
}

// table is the server's execs by mark.
type table struct {
	mu       sync.Mutex
	procs    map[string]*proc
	finished []*proc // oldest first
}

// add registers a detachable exec. A mark that is still running keeps its
// entry (the new exec is then not re-attachable); a finished one is replaced.
func (t *table) add(p *proc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs == nil {
		t.procs = make(map[string]*proc)
	}
	if old := t.procs[p.mark]; old != nil {
		old.mu.Lock()
		running := old.exit == nil
		old.mu.Unlock()
		if running {
			return false
		}
	}
	t.procs[p.mark] = p
	return true
}

// finished moves p to the finished list, forgetting the oldest past the
// bound.
func (t *table) finish(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs[p.mark] != p {
		return
	}
	t.finished = append(t.finished, p)
	kept := 0
	for _, f := range t.finished {
		kept += f.logBytes()
	}
	for len(t.finished) > maxFinished || len(t.finished) > 1 && kept > finishedBudget {
		old := t.finished[0]
		kept -= old.logBytes()
		t.finished = t.finished[1:]
		if t.procs[old.mark] == old {
			delete(t.procs, old.mark)
		}
	}
}

// forget drops p, whose Result nobody took, from the table.
func (t *table) forget(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs[p.mark] == p {
		delete(t.procs, p.mark)
	}
	for i, f := range t.finished {
		if f == p {
			t.finished = append(t.finished[:i:i], t.finished[i+1:]...)
			break
		}
	}
}

func (p *proc) logBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs[0].bytes() + p.logs[1].bytes()
}

func (t *table) get(mark string) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[mark]
}
