package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/proctree"
)

// peer is a raw worker on a served connection: it writes frames and reads
// the agent's, for tests that need to see what a real worker's client would
// refuse or hide.
type peer struct {
	t      *testing.T
	w      *io.PipeWriter
	frames chan proto.Frame
	served chan error
}

// serveRaw serves a real server on pipes and completes the handshake.
func serveRaw(t *testing.T, cfg Config) (*Server, *peer) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Env = os.Environ()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, connectRaw(t, s)
}

// connectRaw serves s on a new connection (a new worker) and completes
// the handshake.
func connectRaw(t *testing.T, s *Server) *peer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peer{t: t, w: inW, frames: make(chan proto.Frame, 256), served: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { p.served <- s.Serve(ctx, inR, outW, false); _ = outW.Close() }()
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(p.frames)
		fr := proto.NewReader(bufio.NewReader(outR))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			f.Payload = append([]byte(nil), f.Payload...) // the reader reuses its buffer
			p.frames <- f
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
		_ = outR.Close()
		<-read
	})
	p.sendJSON(proto.THello, 0, proto.Hello{Version: proto.Version, Nonce: "n"})
	if f := p.next(); f.Type != proto.THello {
		t.Fatalf("first frame %s, want hello", f.Type)
	}
	return p
}

func (p *peer) sendJSON(typ proto.Type, stream uint32, v any) {
	p.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.w.Write(proto.AppendFrame(nil, proto.Frame{Type: typ, Stream: stream, Payload: b})); err != nil {
		p.t.Fatalf("send %s: %v", typ, err)
	}
}

// next is the agent's next frame; the test fails when none comes within
// 20 s or the agent ended the connection.
func (p *peer) next() proto.Frame {
	p.t.Helper()
	select {
	case f, ok := <-p.frames:
		if !ok {
			p.t.Fatalf("the agent ended the connection: %v", p.servedErr())
		}
		return f
	case <-time.After(20 * time.Second):
		p.t.Fatal("no frame from the agent within 20 s")
	}
	return proto.Frame{}
}

func (p *peer) servedErr() error {
	select {
	case err := <-p.served:
		return err
	case <-time.After(time.Second):
		return errors.New("still serving")
	}
}

// result sends req on stream and returns its Result, skipping data frames.
func (p *peer) result(stream uint32, req proto.Request) proto.Result {
	p.t.Helper()
	p.sendJSON(proto.TRequest, stream, req)
	for {
		f := p.next()
		if f.Type != proto.TResult || f.Stream != stream {
			continue
		}
		r, err := proto.DecodeResult(f.Payload)
		if err != nil {
			p.t.Fatalf("result of %s: %v", req.Op, err)
		}
		return r
	}
}

// Listing an empty directory answers an empty listing: it once indexed the
// first entry of an empty slice, and the agent, the sandbox's main process,
// died of the panic (issue 22, A.1).
func TestListEmptyDirectory(t *testing.T) {
	_, p := serveRaw(t, Config{})
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		wantFiles int
		wantSelf  string
	}{
		{"empty directory", empty, 0, ""},
		{"empty directory again", empty, 0, ""},
		{"a file", file, 0, "f"},
		{"a directory with one file", filepath.Dir(file), 1, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := p.result(uint32(i+1), proto.Request{Op: proto.OpList, Path: tt.path})
			if r.Error != nil || len(r.Files) != tt.wantFiles {
				t.Fatalf("list %s: %d files, error %v", tt.path, len(r.Files), r.Error)
			}
			if self := r.Stat; (self == nil) != (tt.wantSelf == "") || self != nil && self.Name != tt.wantSelf {
				t.Fatalf("list %s: self %+v, want %q", tt.path, self, tt.wantSelf)
			}
		})
	}
}

// A request whose handler panics is answered with an internal error, and
// the agent goes on serving the same connection.
func TestRequestPanicIsAnswered(t *testing.T) {
	s, p := serveRaw(t, Config{})
	s.testPanic = func(op string) {
		if op == proto.OpStat {
			panic("stat broke")
		}
	}
	r := p.result(1, proto.Request{Op: proto.OpStat, Path: "/"})
	if r.Error == nil || r.Error.Kind != proto.ErrInternal {
		t.Fatalf("a panicking request: %+v, want an %s error", r, proto.ErrInternal)
	}
	if strings.Contains(r.Error.Message, "stat broke") {
		t.Errorf("the panic's value reached the wire: %q", r.Error.Message)
	}
	r = p.result(2, proto.Request{Op: proto.OpList, Path: "/"})
	if r.Error != nil || len(r.Files) == 0 {
		t.Fatalf("the next request: %+v", r)
	}
}

// A panic in an exec after its process started is answered with an
// internal error and leaves nothing behind: the process tree is killed (the
// exit says so), not left running unaccounted while the table says the exec
// finished (review #11).
func TestExecPanicAfterStartKillsTheProcess(t *testing.T) {
	s, p := serveRaw(t, Config{})
	s.testPanic = func(op string) {
		if op == opExecStarted {
			panic("exec broke after the start")
		}
	}
	const mark = "p-panic-started"
	r := p.result(1, proto.Request{Op: proto.OpExec, Argv: []string{"sleep", "600"}, Mark: mark})
	if r.Error == nil || r.Error.Kind != proto.ErrInternal || r.Exit == nil || !r.Exit.Killed {
		t.Fatalf("a panic after the start: %+v (exit %+v), want an %s error and a killed exit", r, r.Exit, proto.ErrInternal)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if left := proctree.Tree(0, mark, proctree.Scope{Skip: []int{os.Getpid()}}); len(left) > 0 {
			return fmt.Errorf("processes %v of the exec still run", left)
		}
		return nil
	})
}

// A detached exec (its connection ended, no worker re-attached) still ends:
// output that comes while nobody is attached goes to its log, the process
// never blocks on a full pipe, and once it exited its entry and logs are
// freed after the detach window (issue 22, A.4: the pump waited for an
// attachment forever, the process with it).
func TestDetachedExecEnds(t *testing.T) {
	tests := []struct {
		name   string
		script string
	}{
		{"output after the detach", "echo late; echo late >&2"},
		{"more output than a pipe holds", "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, p := serveRaw(t, Config{DetachWindow: 300 * time.Millisecond})
			mark := "p-detached-" + strconv.Itoa(i)
			release := execDetached(t, s, p, 1, mark, tt.script)
			release() // the worker is gone, and no other comes
			poll.Eventually(t, 30*time.Second, func() error {
				if s.table.get(mark) != nil {
					return errors.New("the detached exec is still in the table")
				}
				return nil
			})
		})
	}
}

// An event whose path the API cannot carry (a 250-byte name in a watched
// directory whose path is near the 4,096-byte bound) is dropped and counted,
// never sent: the worker judged the over-long path a protocol violation and
// killed the sandbox (issue 22, A.2).
func TestWatchDropsAnOverlongPath(t *testing.T) {
	_, p := serveRaw(t, Config{})
	dir := t.TempDir()
	for len(dir) < 3900 {
		dir = filepath.Join(dir, strings.Repeat("d", min(200, 3900-len(dir))))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The files' own paths are over PATH_MAX: made relative to the
	// directory, as a process working in it would.
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	p.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpWatch, Path: dir, TimeoutMS: 20_000, Max: 10})
	var r proto.Result
	var failed error
	name := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("n", 247) }
	poll.Eventually(t, 20*time.Second, func() error {
		select {
		case f, ok := <-p.frames:
			if !ok {
				failed = fmt.Errorf("the agent ended the connection: %v", p.servedErr())
				return nil
			}
			if f.Type != proto.TResult {
				return errors.New("not the result")
			}
			var err error
			if r, err = proto.DecodeResult(f.Payload); err != nil {
				failed = fmt.Errorf("the watch's result: %w", err)
			}
			return nil
		default:
		}
		// The watch is set up at a moment the test cannot see: a new file
		// until it answers.
		for i := 0; i < 1000; i++ {
			f, err := root.OpenFile(name(i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
				break
			}
		}
		return errors.New("no answer yet")
	})
	if failed != nil {
		t.Fatal(failed)
	}
	for _, ev := range r.Events {
		if len(ev.Path) > proto.MaxPath {
			t.Errorf("an event of %d bytes was sent", len(ev.Path))
		}
	}
	if r.Error != nil || r.Dropped == 0 || r.Count&proto.WatchTruncated == 0 || r.Count&proto.WatchDropped == 0 {
		t.Fatalf("watch: %d events, %d dropped, count %d, error %v: want dropped events counted and the answer truncated",
			len(r.Events), r.Dropped, r.Count, r.Error)
	}
}

// A worker that attaches within the detach window gets a detached exec's
// output and Result; after the window the exec is forgotten (ErrLost).
func TestDetachWindow(t *testing.T) {
	s, p := serveRaw(t, Config{DetachWindow: time.Hour})
	execDetached(t, s, p, 1, "p-window", "echo late")()
	q := connectRaw(t, s)
	q.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpAttach, Mark: "p-window"})
	var out []byte
	for {
		f := q.next()
		if f.Type == proto.TStdout {
			out = append(out, f.Payload...)
			continue
		}
		if f.Type != proto.TResult {
			continue
		}
		r, err := proto.DecodeResult(f.Payload)
		if err != nil || r.Error != nil || r.Exit == nil || r.Exit.Code != 0 || string(out) != "late\n" {
			t.Fatalf("re-attached: %+v %v, output %q", r, err, out)
		}
		break
	}

	s.cfg.DetachWindow = 200 * time.Millisecond
	execDetached(t, s, q, 2, "p-expired", "echo gone")()
	poll.Eventually(t, 20*time.Second, func() error {
		if s.table.get("p-expired") != nil {
			return errors.New("still in the table")
		}
		return nil
	})
	r := connectRaw(t, s).result(1, proto.Request{Op: proto.OpAttach, Mark: "p-expired"})
	if r.Error == nil || r.Error.Kind != proto.ErrLost {
		t.Fatalf("attach after the window: %+v, want %s", r, proto.ErrLost)
	}
}

// execDetached starts script as an exec with mark on p's stream and returns
// release: it closes p (the worker is gone), waits until the agent has seen
// the close (the exec has no attachment), and only then lets the script run.
// Without the gate a fast process's Result could reach p before its close
// was processed, and the exec would end as a delivered one, never detached.
func execDetached(t *testing.T, s *Server, p *peer, stream uint32, mark, script string) (release func()) {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "go")
	p.sendJSON(proto.TRequest, stream, proto.Request{Op: proto.OpExec, Mark: mark,
		Argv: []string{"sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.01; done; ` + script},
		Env:  []string{"GATE=" + gate}})
	var e *proc
	poll.Eventually(t, 20*time.Second, func() error {
		if e = s.table.get(mark); e == nil {
			return errors.New("the exec is not in the table yet")
		}
		if a, _ := e.attached(); a == nil {
			return errors.New("the exec is not attached yet")
		}
		return nil
	})
	return func() {
		t.Helper()
		_ = p.w.Close()
		poll.Eventually(t, 20*time.Second, func() error {
			if a, _ := e.attached(); a != nil {
				return errors.New("the exec is still attached to the closed connection")
			}
			return nil
		})
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
