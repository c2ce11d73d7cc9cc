package modalfake

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/internal/timerslack"
)

// proc is one exec: a real process in the sandbox's jail, or the built-in
// fs-tools. It keeps the whole stdout and stderr history so that a reader
// can (re)start at any offset.
type proc struct {
	id string

	mu      sync.Mutex
	out     [2][]byte
	eof     [2]bool
	changed chan struct{} // closed and replaced on every change
	exited  bool
	code    int32
	signal  int32
	pgid    int

	stdinMu     sync.Mutex // serialises writes to stdin
	stdin       io.WriteCloser
	written     uint64
	stdinClosed bool

	exitCh chan struct{}
	timer  *time.Timer
}

func newProc(id string) *proc {
	return &proc{id: id, changed: make(chan struct{}), exitCh: make(chan struct{})}
}

func (p *proc) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// appendOut adds output on fd 0 (stdout) or 1 (stderr).
func (p *proc) appendOut(fd int, b []byte) {
	p.mu.Lock()
	p.out[fd] = append(p.out[fd], b...)
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *proc) closeOut(fd int) {
	p.mu.Lock()
	p.eof[fd] = true
	p.notifyLocked()
	p.mu.Unlock()
}

// snapshot returns the bytes of fd from off, whether the fd is at EOF, and
// a channel closed on the next change.
func (p *proc) snapshot(fd int, off uint64) ([]byte, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b []byte
	if off < uint64(len(p.out[fd])) {
		b = p.out[fd][off:]
	}
	return b, p.eof[fd], p.changed
}

func (p *proc) setExit(code, signal int32) {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return
	}
	p.exited, p.code, p.signal = true, code, signal
	if p.timer != nil {
		p.timer.Stop()
	}
	p.notifyLocked()
	p.mu.Unlock()
	close(p.exitCh)
}

func (p *proc) exitStatus() (exited bool, code, signal int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.code, p.signal
}

// kill signals the whole process group.
func (p *proc) kill(sig syscall.Signal) {
	p.mu.Lock()
	pgid := p.pgid
	p.mu.Unlock()
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// writeStdin applies a write at offset: the overlap with what was already
// written is dropped (a retry), a gap is an error.
var (
	errStdinGap    = errors.New("stdin offset is past the bytes written")
	errStdinClosed = errors.New("stdin is closed")
)

func (p *proc) writeStdin(off uint64, data []byte, eof bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdinClosed {
		if len(data) == 0 && eof {
			return nil // the router ignores a second EOF
		}
		return errStdinClosed
	}
	if exited, _, _ := p.exitStatus(); exited {
		return errStdinClosed
	}
	if off > p.written {
		return errStdinGap
	}
	skip := p.written - off
	if skip < uint64(len(data)) {
		data = data[skip:]
		if p.stdin != nil {
			if _, err := p.stdin.Write(data); err != nil {
				return errStdinClosed
			}
		}
		p.written += uint64(len(data))
	}
	if eof {
		p.stdinClosed = true
		if p.stdin != nil {
			_ = p.stdin.Close()
		}
	}
	return nil
}

func (p *proc) stdinStatus() (uint64, bool) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	return p.written, p.stdinClosed
}

// start runs cmd with pipes for the three fds; pipeOut says which of
// stdout/stderr are PIPE (the others go to /dev/null and read as empty).
func (p *proc) start(cmd *exec.Cmd, pipeOut [2]bool, wg *sync.WaitGroup) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	var readers [2]*os.File
	var writers [2]*os.File
	for fd := 0; fd < 2; fd++ {
		if !pipeOut[fd] {
			p.closeOut(fd)
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		readers[fd], writers[fd] = r, w
	}
	cmd.Stdin = inR
	if writers[0] != nil {
		cmd.Stdout = writers[0]
	}
	if writers[1] != nil {
		cmd.Stderr = writers[1]
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = timerslack.Start(cmd.Start)
	_ = inR.Close()
	for _, w := range writers {
		if w != nil {
			_ = w.Close()
		}
	}
	if err != nil {
		_ = inW.Close()
		for _, r := range readers {
			if r != nil {
				_ = r.Close()
			}
		}
		return err
	}
	p.mu.Lock()
	p.pgid = cmd.Process.Pid
	p.mu.Unlock()
	p.stdin = inW
	var pipes sync.WaitGroup
	for fd, r := range readers {
		if r == nil {
			continue
		}
		pipes.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pipes.Done()
			defer r.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					p.appendOut(fd, buf[:n])
				}
				if err != nil {
					p.closeOut(fd)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := cmd.Wait()
		var code, sig int32
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					sig = int32(ws.Signal())
				} else {
					code = int32(ee.ExitCode())
				}
			} else {
				code = -1
			}
		}
		// Output that is still buffered in the pipes belongs to the exec:
		// wait for the readers, bounded (a background child may hold a pipe).
		drained := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); pipes.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(2 * time.Second):
		}
		p.stdinMu.Lock()
		_ = inW.Close()
		p.stdinMu.Unlock()
		p.setExit(code, sig)
	}()
	return nil
}
