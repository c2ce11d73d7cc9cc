package server

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// stdio is an exec's standard streams: the child's three files and the
// agent's ends (pipes, or a PTY's master for both ways).
type stdio struct {
	child            [3]*os.File
	outR, errR, inW  *os.File
	master           *os.File // PTY only
	closeChildFiles  []*os.File
	closeParentFiles []*os.File
}

func (s *stdio) closeChild() {
	for _, f := range s.closeChildFiles {
		f.Close()
	}
}

func (s *stdio) closeParent() {
	for _, f := range s.closeParentFiles {
		f.Close()
	}
}

// devNull is the agent's one /dev/null, every exec's stdin without input
// (the child gets a copy as its fd 0): not opened once per exec.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

func openStdio(req proto.Request) (*stdio, error) {
	if req.TTY {
		return openPTYStdio(req)
	}
	s := &stdio{}
	fail := func(err error) (*stdio, error) {
		s.closeChild()
		s.closeParent()
		return nil, err
	}
	outR, outW, err := pipe(false)
	if err != nil {
		return fail(err)
	}
	s.closeChildFiles, s.closeParentFiles = append(s.closeChildFiles, outW), append(s.closeParentFiles, outR)
	errR, errW, err := pipe(false)
	if err != nil {
		return fail(err)
	}
	s.closeChildFiles, s.closeParentFiles = append(s.closeChildFiles, errW), append(s.closeParentFiles, errR)
	growPipe(outR)
	var inR *os.File
	if req.Stdin {
		var inW *os.File
		if inW, inR, err = pipe(true); err != nil {
			return fail(err)
		}
		s.inW = inW
		s.closeParentFiles = append(s.closeParentFiles, inW)
	} else if inR, err = devNull(); err != nil {
		return fail(err)
	}
	if req.Stdin {
		s.closeChildFiles = append(s.closeChildFiles, inR)
	}
	s.child = [3]*os.File{inR, outW, errW}
	s.outR, s.errR = outR, errR
	return s, nil
}

// pipe is os.Pipe for a child's standard stream: the agent's end is in the
// poller (non-blocking, deadlines work) and the child's end never is. os.Pipe
// puts both in it, and os.StartProcess then takes the child's end out of
// non-blocking mode again: ten system calls an exec for nothing.
func pipe(childReads bool) (agentEnd, childEnd *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	mine, theirs := p[0], p[1]
	if childReads {
		mine, theirs = p[1], p[0]
	}
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	// NewFile makes a non-blocking descriptor pollable and leaves a
	// blocking one alone.
	return os.NewFile(uintptr(mine), "|agent"), os.NewFile(uintptr(theirs), "|child"), nil
}

// openPTYStdio opens a pseudo-terminal: the child gets the slave as its
// controlling terminal and all three streams (stderr merges into stdout, as
// on a terminal); the agent reads output from the master and writes input
// to a second descriptor of it.
func openPTYStdio(req proto.Request) (*stdio, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open a pty: %w", err)
	}
	var name string
	var ierr error
	sc, err := master.SyscallConn()
	if err == nil {
		err = sc.Control(func(fd uintptr) {
			if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr != nil {
				return
			}
			var n uint32
			if n, ierr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN); ierr == nil {
				name = fmt.Sprintf("/dev/pts/%d", n)
			}
		})
	}
	if err == nil {
		err = ierr
	}
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("set up a pty: %w", err)
	}
	slave, err := os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	rows, cols := req.Rows, req.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	setWinsize(master, proto.Resize{Rows: rows, Cols: cols})
	in, err := dupFile(master)
	if err != nil {
		master.Close()
		slave.Close()
		return nil, err
	}
	return &stdio{child: [3]*os.File{slave, slave, slave}, outR: master, inW: in, master: master,
		closeChildFiles: []*os.File{slave}, closeParentFiles: []*os.File{master, in}}, nil
}

func dupFile(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := sc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

func setWinsize(master *os.File, r proto.Resize) {
	if r.Rows == 0 || r.Cols == 0 {
		return
	}
	if sc, err := master.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) {
			_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: r.Rows, Col: r.Cols})
		})
	}
}
