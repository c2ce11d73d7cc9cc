package server

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/proctree"
)

// EnvMark is the variable that marks an exec's process tree (the process id).
const EnvMark = proctree.EnvMark

// exitGrace is how long output is still read after the process exited while
// something it left behind holds its stdout or stderr open.
const exitGrace = 200 * time.Millisecond

// opExecStarted is what the test panic hook is called with once an exec's
// process started.
const opExecStarted = "exec started"

// exec runs one process and streams its output within its attachment's
// credit. It returns once the process has exited and its output is drained
// (to this connection or, for a detached exec, a later one).
//
// A panic after the process started (recovered by execGuarded) leaves
// nothing behind: the deferred abort kills the tree, stops the timer, closes
// the agent's ends of the pipes and sets *aborted.
func (s *Server) exec(ctx context.Context, p *proc, st *stream, req proto.Request, aborted *bool) *proto.Exit {
	env := mergeEnv(s.cfg.Env, req.Env)
	if req.Mark != "" {
		env = mergeEnv(env, []string{EnvMark + "=" + req.Mark})
	}
	dir := req.Cwd
	if dir == "" {
		dir = s.cfg.Dir
	}
	argv0, err := lookPath(req.Argv[0], env, dir)
	if err != nil {
		return startFailure(err)
	}
	procDir := ""
	if dir != s.cfg.Dir || !s.dirStable {
		// Checked here for its own message; the agent's own directory
		// needs neither the check nor the child's chdir (stableDir).
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return &proto.Exit{Code: 126, StartError: "cwd " + dir + ": not a directory or not found"}
		}
		procDir = dir
	}
	pipes, err := openStdio(req)
	if err != nil {
		return startFailure(err)
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if pipes.master != nil {
		sys.Setctty, sys.Ctty = true, 0
		env = mergeEnv([]string{"TERM=xterm-256color"}, env)
	}
	pid, exited, err := s.procs.start(argv0, req.Argv, &os.ProcAttr{Dir: procDir, Env: env,
		Files: pipes.child[:], Sys: sys}, s.cfg.ChildTimerSlack)
	pipes.closeChild()
	if err != nil {
		pipes.closeParent()
		return startFailure(err)
	}
	outR, errR, inW := pipes.outR, pipes.errR, pipes.inW
	var killed, timedOut atomic.Bool
	kill := func() { KillTree(pid, req.Mark) }
	var timer *time.Timer
	completed := false
	defer func() {
		if completed {
			return
		}
		// Only on a panic: what the exec started must not outlive it.
		*aborted = true
		if timer != nil {
			timer.Stop()
		}
		kill()
		pipes.closeParent()
		p.endInput(st, inW)
	}()
	if s.testPanic != nil {
		s.testPanic(opExecStarted)
	}
	p.mu.Lock()
	if pipes.master != nil {
		master := pipes.master
		p.onResize = func(r proto.Resize) { setWinsize(master, r) }
		if r := p.resized; r != nil { // asked for before the process started
			setWinsize(master, *r)
		}
	}
	p.onCancel = func() { killed.Store(true); kill() }
	p.onSignal = func(sg proto.Signal) {
		target := pid
		if sg.Group {
			target = -pid
		}
		_ = syscall.Kill(target, syscall.Signal(sg.Signal))
	}
	canceled := p.cancelled
	p.mu.Unlock()
	if canceled {
		killed.Store(true)
		kill()
	}
	if req.TimeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() { timedOut.Store(true); kill() })
	}

	ps := []*pump{{p: p, i: 0, t: proto.TStdout, f: outR}}
	if errR != nil {
		ps = append(ps, &pump{p: p, i: 1, t: proto.TStderr, f: errR})
	}
	// The last pump to end closes pumpsDone.
	pumpsDone := make(chan struct{})
	var running atomic.Int32
	running.Store(int32(len(ps)))
	for _, pm := range ps {
		go func() {
			defer func() {
				if running.Add(-1) == 0 {
					close(pumpsDone)
				}
			}()
			defer s.recovered("exec output", nil)
			pm.run()
		}()
	}
	if inW != nil {
		go func() {
			defer s.recovered("exec input", nil)
			p.feedStdin(st, inW)
		}()
	}

	var ex exitInfo
	select {
	case ex = <-exited:
	case <-ctx.Done():
		killed.Store(true)
		kill()
		ex = <-exited
	}
	if timer != nil {
		timer.Stop()
	}
	waitPumps(ps, pumpsDone)
	p.endInput(st, inW)
	completed = true
	return exitOf(ex, killed.Load(), timedOut.Load())
}

// endInput ends an exec's input once its process is gone: st's, and a
// re-attached stream's, since nothing reads them now; inW (nil: the exec
// had none) is closed.
func (p *proc) endInput(st *stream, inW *os.File) {
	st.in.close()
	if inW == nil {
		return
	}
	inW.Close()
	p.mu.Lock()
	p.stdinDone = true
	a := p.att
	p.wakeLocked()
	p.mu.Unlock()
	if a != nil {
		a.st.in.close()
	}
}

// waitPumps waits, once the process exited, for its output to be drained.
// Past exitGrace, what is still in the pipes is read without waiting for
// more (a process the exec left behind may hold them open); a pump that
// waits for its worker's credit is then bounded by that worker, whose
// connection's end ends the wait.
func waitPumps(ps []*pump, done <-chan struct{}) {
	grace := time.NewTimer(exitGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	for _, pm := range ps {
		pm.drain()
	}
	<-done
}

// deliver sends an exec's Result, after whatever output the attachment has
// not had yet, to its current attachment: for a detached exec, to the next
// worker that attaches within window. false: nobody took it (the exec was
// abandoned, or no worker attached in time).
func (p *proc) deliver(r proto.Result, window time.Duration) bool {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	deadline := time.Now().Add(window)
	for {
		a := p.waitAttached(deadline)
		if a == nil {
			if p.abandonDetached() {
				return false
			}
			continue // attached as the window closed
		}
		if !p.flush(a, 0, proto.TStdout, buf) || !p.flush(a, 1, proto.TStderr, buf) {
			continue
		}
		if a.c.out.json(proto.TResult, a.st.id, r) != nil {
			p.lost(a)
			continue
		}
		a.c.ended(a.st)
		p.mu.Lock()
		before := p.logs[0].bytes() + p.logs[1].bytes()
		// Not recycled: what a finished exec gives back goes to the OS
		// (below), not into a pool that would keep it.
		p.logs[0].trim(deliveredRetain, false)
		p.logs[1].trim(deliveredRetain, false)
		freed := before - p.logs[0].bytes() - p.logs[1].bytes()
		p.mu.Unlock()
		if freed >= 2<<20 {
			// The agent's memory is the sandbox's: give a big log back now
			// rather than at the scavenger's pace.
			go debug.FreeOSMemory()
		}
		return true
	}
}

func exitOf(ex exitInfo, killed, timedOut bool) *proto.Exit {
	e := &proto.Exit{Killed: killed, TimedOut: timedOut, MaxRSSKB: ex.ru.Maxrss}
	switch {
	case ex.ws.Exited():
		e.Code = ex.ws.ExitStatus()
	case ex.ws.Signaled():
		e.Signal = int(ex.ws.Signal())
		e.Code = 128 + e.Signal
		e.CoreDumped = ex.ws.CoreDump()
	}
	return e
}

func startFailure(err error) *proto.Exit {
	code := 126
	var errno syscall.Errno
	if errors.Is(err, os.ErrNotExist) || errors.As(err, &errno) && errno == syscall.ENOENT {
		code = 127
	}
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return &proto.Exit{Code: code, StartError: msg}
}

// pump copies one pipe to the exec's log and on to its attachment. While no
// worker is attached (a detached exec), it goes on reading into the log, so
// that the process never blocks on a full pipe: the log keeps the last
// Retain bytes for the worker that re-attaches.
type pump struct {
	p        *proc
	i        int // 0 stdout, 1 stderr
	t        proto.Type
	f        *os.File
	reading  atomic.Bool // blocked (or about to block) in a read
	draining atomic.Bool // the process exited: read only what is there
}

// pumpRead is the most one read takes from a pipe: several frames, sent in
// one write.
const pumpRead = 4 * proto.MaxData

// pumpBufs recycles the pumps' read buffers: two fresh 256 KiB buffers per
// exec would make the agent's small heap collect every few execs.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, pumpRead); return &b }}

func (pm *pump) run() {
	defer pm.f.Close()
	p := pm.p
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	for {
		a, gone := p.attached()
		if gone {
			return // abandoned with its connection
		}
		if a == nil {
			n, err := pm.read(buf)
			p.mu.Lock()
			p.logs[pm.i].append(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		// A re-attached worker first gets what it had not stored.
		if !p.flush(a, pm.i, pm.t, buf) {
			continue
		}
		k, ok := a.st.outCredit.take(pumpRead)
		if !ok {
			p.lost(a)
			continue
		}
		n, err := pm.read(buf[:k])
		if n < k {
			a.st.outCredit.add(int64(k - n))
		}
		if n > 0 {
			p.mu.Lock()
			direct := p.att == a && a.cursor[pm.i] == p.logs[pm.i].end
			p.logs[pm.i].append(buf[:n])
			if direct {
				a.cursor[pm.i] = p.logs[pm.i].end
			}
			p.mu.Unlock()
			if !direct {
				a.st.outCredit.add(int64(n)) // the next flush sends it
			} else if a.c.out.sendData(pm.t, a.st.id, buf[:n], &a.st.seq) != nil {
				p.lost(a) // kept in the log for the next attachment
			}
		}
		if err != nil {
			// What the log holds past the cursor goes out with the Result.
			return
		}
	}
}

// read reads the pipe, waiting for output until the pump drains; then only
// what is in the pipe now.
func (pm *pump) read(buf []byte) (int, error) {
	pm.reading.Store(true)
	if pm.draining.Load() {
		pm.reading.Store(false)
		return pm.readNow(buf)
	}
	n, err := pm.f.Read(buf)
	pm.reading.Store(false)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && pm.draining.Load() {
		return pm.readNow(buf) // woken by drain
	}
	return n, err
}

// readNow reads what the pipe holds without waiting: io.EOF once it is
// empty or at its end.
func (pm *pump) readNow(buf []byte) (int, error) {
	_ = pm.f.SetReadDeadline(time.Time{})
	sc, err := pm.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := sc.Read(func(fd uintptr) bool {
		for {
			if n, rerr = unix.Read(int(fd), buf); rerr != unix.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, io.EOF // empty (EAGAIN), at its end, or a terminal whose other side closed (EIO)
	}
	return n, nil
}

// drain makes the pump read only what its pipe holds from now on, waking
// it if it waits in a read.
func (pm *pump) drain() {
	pm.draining.Store(true)
	if pm.reading.Load() {
		_ = pm.f.SetReadDeadline(time.Now())
	}
}

// GrowPipe is growPipe for the agent's own channel (its stdout, a FIFO to
// the container runtime): bursts of frames are written without waiting for
// the daemon to drain 64 KiB at a time.
func GrowPipe(f *os.File) { growPipe(f) }

// growPipe asks for a 1 MiB pipe (the unprivileged maximum by default):
// fewer wake-ups for a process that writes fast.
func growPipe(f *os.File) {
	if sc, err := f.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
}

// feedStdin writes the worker's stdin frames to the process. A detachable
// exec's stdin outlives its connection: when the connection ends without the
// worker's EOF, the stream of the next attachment (a restarted worker's)
// carries on, and only the worker's EOF or the exec's end closes it.
func (p *proc) feedStdin(st *stream, w *os.File) {
	defer w.Close()
	for {
		feed(st, w)
		if st.in.byWorker() || !p.detachable {
			return
		}
		if st = p.nextStream(st); st == nil {
			return
		}
	}
}

// nextStream waits for an attachment on another stream than st; nil once
// the exec's input has ended or nobody will attach.
func (p *proc) nextStream(st *stream) *stream {
	for {
		p.mu.Lock()
		a, ch, done := p.att, p.changed, p.stdinDone || p.abandoned || p.exit != nil
		p.mu.Unlock()
		if done {
			return nil
		}
		if a != nil && a.st != st {
			return a.st
		}
		<-ch
	}
}

// feed writes one stream's stdin frames to the process, granting credit
// back, until the stream's input ends.
func feed(st *stream, w *os.File) {
	c := st.c
	for {
		b, ok := st.in.pop()
		if !ok {
			return
		}
		_, err := w.Write(b)
		_ = c.out.send(proto.Frame{Type: proto.TWindow, Stream: st.id, Payload: proto.WindowPayload(uint32(len(b)))}, nil)
		if err != nil {
			// The process closed its stdin: drain the rest.
			for {
				if b, ok = st.in.pop(); !ok {
					return
				}
				_ = c.out.send(proto.Frame{Type: proto.TWindow, Stream: st.id, Payload: proto.WindowPayload(uint32(len(b)))}, nil)
			}
		}
	}
}

// mergeEnv lays over on base: a name in over replaces base's.
func mergeEnv(base, over []string) []string {
	idx := make(map[string]int, len(base)+len(over))
	out := make([]string, 0, len(base)+len(over))
	for _, list := range [][]string{base, over} {
		for _, kv := range list {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// lookPath finds argv0 in the exec's own PATH (not the agent's), through
// the PATH cache of earlier searches (pathCache).
func lookPath(argv0 string, env []string, dir string) (string, error) {
	if strings.Contains(argv0, "/") {
		if !filepath.IsAbs(argv0) {
			argv0 = filepath.Join(dir, argv0)
		}
		return argv0, checkExecutable(argv0)
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	dirs, relative := searchDirs(pathEnv, dir)
	k := pathKey{path: pathEnv, name: argv0}
	if relative {
		k.dir = dir
	}
	if p, ok := inotify.pathGet(k); ok {
		return p, nil
	}
	gen, cacheable := inotify.pathWatch(dirs)
	p, err := searchPath(argv0, dirs)
	if err == nil && cacheable {
		// A link's target may be in a directory the search did not
		// watch: watched too, and looked at again once it is.
		if real, lerr := filepath.EvalSymlinks(p); lerr == nil && real != p {
			again, ok := inotify.pathWatch([]string{filepath.Dir(real)})
			cacheable = ok && again == gen && checkExecutable(p) == nil
		}
		if cacheable {
			inotify.pathPut(k, p, gen)
		}
	}
	return p, err
}

// searchDirs is PATH's directories, made absolute against dir; relative
// says whether one was not (its answer depends on dir).
func searchDirs(pathEnv, dir string) (dirs []string, relative bool) {
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d, relative = filepath.Join(dir, d), true
		}
		dirs = append(dirs, d)
	}
	return dirs, relative
}

// searchPath is the first executable argv0 in dirs.
func searchPath(argv0 string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, argv0)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", &os.PathError{Op: "exec", Path: argv0, Err: errNotInPath}
}

// errNotInPath is a not-found error (exit 127) with the shell's wording.
var errNotInPath = notInPath{}

type notInPath struct{}

func (notInPath) Error() string { return "executable file not found in $PATH" }
func (notInPath) Unwrap() error { return os.ErrNotExist }

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return &os.PathError{Op: "exec", Path: p, Err: syscall.EACCES}
	}
	return nil
}
