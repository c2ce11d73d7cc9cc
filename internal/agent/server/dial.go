package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// A dial (proto.OpDial) connects to a port on the sandbox's loopback and
// carries the connection's bytes as data frames: what the worker sends is
// written to the connection, within the stream's inbox window, and credited
// back once written; what the connection gives is sent within the worker's
// credit. The agent serves ports from inside the sandbox's network
// namespace, so a sandbox without a network (egress denied: only lo) is
// reached on its published ports and on nothing else.
//
// The agent itself listens on no TCP port (its channel is a unix socket or
// its attached stdio), so no port of its own needs refusing.

// Bounds on dials.
const (
	// MaxDials bounds the dials one connection carries at once (a
	// gateway's WebSockets); more are answered ErrBusy.
	MaxDials = 2048
	// dialTimeout bounds a connect (a listener whose accept queue is full
	// drops SYNs; the kernel would retry for minutes).
	dialTimeout = 5 * time.Second
	// dialBuffer is what one read from the connection takes at most.
	dialBuffer = 32 << 10
	// dialWindow is the credit a dial's stream starts with toward the
	// worker, below proto.DefaultWindow: the worker holds at most this
	// much of each connection's bytes (it credits back every quarter of
	// proto.DefaultWindow, so the agent keeps half of this while it waits).
	dialWindow = proto.DefaultWindow / 2
)

// errRefused is a loopback address where nothing accepts connections.
var errRefused = errors.New("connection refused")

// dial serves an OpDial on st to its Result.
func (c *conn) dial(st *stream, req proto.Request) {
	limit := int64(MaxDials)
	if c.s.maxDials > 0 {
		limit = int64(c.s.maxDials)
	}
	if n := c.dials.Add(1); n > limit {
		c.dials.Add(-1)
		c.result(st, proto.Result{Error: &proto.Error{Kind: proto.ErrBusy,
			Message: fmt.Sprintf("%d connections are carried already", limit)}})
		return
	}
	// The place is free before the Result says the dial ended: a worker
	// that dials again on that answer finds it free.
	release := sync.OnceFunc(func() { c.dials.Add(-1) })
	defer release()
	f, err := dialLoopback(req.Port, dialTimeout)
	if err != nil {
		kind := proto.ErrIO
		if errors.Is(err, errRefused) {
			kind = proto.ErrRefused
		}
		release()
		c.result(st, proto.Result{Error: &proto.Error{Kind: kind, Message: fmt.Sprintf("port %d: %v", req.Port, err)}})
		return
	}
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(func() { _ = f.Close() }) }
	defer closeConn()
	// A cancel (the worker closed its end) or the connection's end stops
	// both directions.
	st.mu.Lock()
	stop := func() { closeConn(); st.in.close(); st.outCredit.close() }
	st.onCancel = stop
	cancelled := st.canceled
	st.mu.Unlock()
	if cancelled {
		stop()
	}
	if err := c.out.send(proto.Frame{Type: proto.TConnected, Stream: st.id}, nil); err != nil {
		return
	}
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.s.recovered(proto.OpDial, func(*proto.Error) { closeConn() })
		werr = c.dialWrite(st, f)
		if werr != nil {
			closeConn() // the reader ends too
		}
	}()
	rerr := c.dialRead(st, f)
	if rerr != nil {
		stop()
	}
	wg.Wait()
	var e *proto.Error
	switch err := errors.Join(rerr, werr); {
	case err == nil:
	case st.isCanceled():
		// The worker's own close: nobody waits for the reason.
	default:
		e = &proto.Error{Kind: proto.ErrIO, Message: fmt.Sprintf("port %d: %v", req.Port, err)}
	}
	closeConn()
	release()
	c.result(st, proto.Result{Error: e})
}

// dialRead sends what the connection gives within the worker's credit, and
// TEOF at its end.
func (c *conn) dialRead(st *stream, f *os.File) error {
	buf := make([]byte, dialBuffer)
	for {
		k, ok := st.outCredit.take(len(buf))
		if !ok {
			return nil // the stream ended
		}
		n, err := f.Read(buf[:k])
		if n < k {
			st.outCredit.add(int64(k - n))
		}
		if n > 0 {
			if e := c.out.send(proto.Frame{Type: proto.TData, Stream: st.id, Payload: buf[:n]}, &st.seq); e != nil {
				return nil // the worker's connection ended
			}
		}
		if err == io.EOF {
			_ = c.out.send(proto.Frame{Type: proto.TEOF, Stream: st.id}, &st.seq)
			return nil
		}
		if err != nil {
			if st.isCanceled() {
				return nil
			}
			return err
		}
	}
}

// dialWrite writes what the worker sends to the connection, crediting it
// back once written; the worker's TEOF half-closes the connection.
func (c *conn) dialWrite(st *stream, f *os.File) error {
	for {
		b, ok := st.in.pop()
		if !ok {
			if st.in.byWorker() {
				return shutdownWrite(f)
			}
			return nil // cancelled or the connection ended
		}
		if _, err := f.Write(b); err != nil {
			if st.isCanceled() {
				return nil
			}
			return err
		}
		_ = c.out.send(proto.Frame{Type: proto.TWindow, Stream: st.id, Payload: proto.WindowPayload(uint32(len(b)))}, nil)
	}
}

func (s *stream) isCanceled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canceled
}

// dialLoopback connects to port on 127.0.0.1, then on ::1 when that is
// refused, with system calls (package net would link the agent against
// libc when cgo is on). The file is non-blocking, in Go's poller.
func dialLoopback(port int, timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	f, err := dialAddr(unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}, deadline)
	if err == nil || !errors.Is(err, errRefused) {
		return f, err
	}
	f6, err6 := dialAddr(unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}}, deadline)
	if err6 == nil {
		return f6, nil
	}
	return nil, err // the IPv4 refusal: a sandbox without IPv6 says nothing more
}

func dialAddr(family int, sa unix.Sockaddr, deadline time.Time) (*os.File, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	err = unix.Connect(fd, sa)
	for err == unix.EINTR {
		err = unix.Connect(fd, sa)
	}
	switch err {
	case nil, unix.EINPROGRESS:
	case unix.ECONNREFUSED:
		_ = unix.Close(fd)
		return nil, errRefused
	default:
		_ = unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dial")
	if err == unix.EINPROGRESS {
		if err := waitConnected(f, deadline); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return f, nil
}

// waitConnected waits, in Go's poller, for a non-blocking connect to end.
func waitConnected(f *os.File, deadline time.Time) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	_ = f.SetWriteDeadline(deadline)
	defer func() { _ = f.SetWriteDeadline(time.Time{}) }()
	var cerr error
	err = rc.Write(func(fd uintptr) bool {
		soerr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
		case soerr == int(unix.ECONNREFUSED):
			cerr = errRefused
		case soerr != 0:
			cerr = unix.Errno(soerr)
		default:
			if _, err := unix.Getpeername(int(fd)); err == unix.ENOTCONN {
				return false // still connecting
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return cerr
}

// shutdownWrite half-closes the connection (the worker's TEOF).
func shutdownWrite(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	if serr == unix.ENOTCONN {
		return nil // the peer is gone already: the reader sees it
	}
	return serr
}
