package main

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/server"
)

// serveSocket serves connections on a unix socket, one at a time. It uses
// system calls, not package net, which would link the binary against libc
// whenever cgo is on (a plain `go build ./cmd/...`).
func serveSocket(s *server.Server, path string, log *slog.Logger) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return err
	}
	if err := unix.Listen(fd, 1); err != nil {
		return err
	}
	for {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(c), "conn")
		err = s.Serve(context.Background(), f, f, true)
		f.Close()
		log.Warn("connection ended", "err", err)
	}
}

// Reconnect delays of serveConnect: a worker that restarts listens again on
// the same path within a few hundred milliseconds; meanwhile the agent tries
// every maxRedial at most (one failed connect). While connected, it tries
// every takeoverProbe whether a new worker listens there (a same-id worker
// started while the old one still holds the connection, as a new Hello
// takes over the attach stream).
const (
	minRedial     = 2 * time.Millisecond
	maxRedial     = 100 * time.Millisecond
	takeoverProbe = 500 * time.Millisecond
	sockBuffer    = 1 << 20
)

// serveConnect is the socket channel of ADR 24: the worker listens on a unix
// socket in a host directory the sandbox cannot write (bind-mounted read-only
// at path's directory), and the agent connects to it. When a connection
// ends (the worker restarted, or closed it), the agent's marked execs are
// detached (ADR 18) and it connects again, for as long as it lives: a
// restarted worker listens on the same path and re-attaches. A worker that
// listens while the agent is connected takes the channel over: the old
// connection is shut down (its execs detached) and the new one served.
func serveConnect(s *server.Server, path string, log *slog.Logger) error {
	fd := dialWait(path)
	for {
		ended := make(chan struct{})
		// closed says fd is closed (its number free for reuse), under mu.
		var mu sync.Mutex
		closed := false
		go func(fd int) {
			defer close(ended)
			f := os.NewFile(uintptr(fd), "conn")
			err := s.Serve(context.Background(), f, f, true)
			mu.Lock()
			f.Close()
			closed = true
			mu.Unlock()
			log.Warn("connection ended", "err", err)
		}(fd)
		next := -1
		probe := time.NewTicker(takeoverProbe)
	wait:
		for {
			select {
			case <-ended:
				break wait
			case <-probe.C:
				if n, err := dial(path); err == nil {
					// A new worker listens: it takes over. Shutdown wakes
					// the old connection's blocked read.
					next = n
					mu.Lock()
					if !closed {
						_ = unix.Shutdown(fd, unix.SHUT_RDWR)
					}
					mu.Unlock()
					<-ended
					break wait
				}
			}
		}
		probe.Stop()
		if next < 0 {
			next = dialWait(path)
		}
		fd = next
	}
}

// dialWait connects to path, trying again until a worker listens there.
func dialWait(path string) int {
	delay := minRedial
	for {
		fd, err := dial(path)
		if err == nil {
			return fd
		}
		time.Sleep(delay) // nobody listens (yet): not a synchronisation
		delay = min(2*delay, maxRedial)
	}
}

// dial makes one connection to the unix socket at path.
func dial(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	for err == unix.EINTR {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	// A unix stream socket's bytes in flight are charged to the sender's
	// buffer (the kernel's default is about 200 KiB): room for the output
	// frames of a stream's whole credit window.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuffer)
	return fd, nil
}
