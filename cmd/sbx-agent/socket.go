package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
		f := pollable(c, "conn")
		err = s.Serve(context.Background(), f, f, true)
		f.Close()
		log.Warn("connection ended", "err", err)
	}
}

// Reconnect delays of serveConnect. The agent learns of a new listener from
// inotify on the socket's directory (the worker's create and chmod of the
// socket): no polling while idle. The delays bound the tries in between:
// while no worker listens, at most every maxRedial; while connected, a
// takeover is looked for every takeoverProbe only when inotify is not
// available.
const (
	minRedial     = 2 * time.Millisecond
	maxRedial     = time.Second
	takeoverProbe = 500 * time.Millisecond
	takeoverHello = 5 * time.Second
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
	changed := watchDir(filepath.Dir(path), log)
	fd := dialWait(path, changed)
	for {
		ended := make(chan struct{})
		// closed says fd is closed (its number free for reuse), under mu.
		var mu sync.Mutex
		closed := false
		go func(fd int) {
			defer close(ended)
			f := pollable(fd, "conn")
			err := s.Serve(context.Background(), f, f, true)
			mu.Lock()
			f.Close()
			closed = true
			mu.Unlock()
			log.Warn("connection ended", "err", err)
		}(fd)
		var probe <-chan time.Time
		var ticker *time.Ticker
		if changed == nil {
			ticker = time.NewTicker(takeoverProbe)
			probe = ticker.C
		}
		next := -1
	wait:
		for {
			select {
			case <-ended:
				break wait
			case <-changed:
			case <-probe:
			}
			if n, err := dial(path); err == nil {
				if !speaks(n, takeoverHello) {
					// Not a new worker: a listener that closed without
					// accepting (the current worker's, just after it
					// accepted this agent), or one that never spoke.
					_ = unix.Close(n)
					continue
				}
				// A new worker listens and has spoken: it takes over.
				// Shutdown wakes the old connection's blocked read.
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
		if ticker != nil {
			ticker.Stop()
		}
		if next < 0 {
			next = dialWait(path, changed)
		}
		fd = next
	}
}

// speaks reports whether the peer of fd sends something within d (a
// worker's Sync and Hello), without reading it.
func speaks(fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return false
		}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		var b [1]byte
		k, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK)
		return err == nil && k == 1
	}
}

// dialWait connects to path, trying again until a worker listens there:
// when the directory changes, and at most every maxRedial.
func dialWait(path string, changed <-chan struct{}) int {
	delay := minRedial
	for {
		fd, err := dial(path)
		if err == nil {
			return fd
		}
		t := time.NewTimer(delay)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		delay = min(2*delay, maxRedial)
	}
}

// watchDir signals on the returned channel whenever an entry of dir is
// created or changes its attributes (a worker making its socket), nil when
// inotify is not to be had. The watch is on the agent's one inotify
// instance, shared with its PATH cache (server.WatchDir, ADR 26).
func watchDir(dir string, log *slog.Logger) <-chan struct{} {
	ch := make(chan struct{}, 1)
	err := server.WatchDir(dir, unix.IN_CREATE|unix.IN_ATTRIB|unix.IN_MOVED_TO, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		log.Warn("no inotify: polling for a worker", "err", err)
		return nil
	}
	return ch
}

// pollable wraps a channel's descriptor for the runtime's netpoller: made
// non-blocking, a read waiting for the worker's next frame parks its
// goroutine instead of holding a thread, and with it a processor, in
// read(2). The runtime's monitor would take that processor back on every
// exec, two context switches and a thread handed off each time (ADR 28).
// Only pipes, FIFOs and sockets are switched: anything else (/dev/null as
// stdin) stays as it is, blocking, and still works. A descriptor the
// netpoller refuses is made blocking again: non-blocking outside it, every
// read that found nothing would fail with EAGAIN.
func pollable(fd int, name string) *os.File {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !pipeOrSocket(st.Mode) || unix.SetNonblock(fd, true) != nil {
		return os.NewFile(uintptr(fd), name)
	}
	f := os.NewFile(uintptr(fd), name)
	if errors.Is(f.SetReadDeadline(time.Time{}), os.ErrNoDeadline) {
		_ = unix.SetNonblock(fd, false)
	}
	return f
}

func pipeOrSocket(mode uint32) bool {
	m := mode & unix.S_IFMT
	return m == unix.S_IFIFO || m == unix.S_IFSOCK
}

// pollableCopy is pollable for a copy of fd (close-on-exec): stdin and
// stdout, which package os wraps already (in its netpoller if they came
// non-blocking), so that the descriptor is not registered twice.
func pollableCopy(fd int, name string) *os.File {
	c, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return pollable(fd, name)
	}
	return pollable(c, name)
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
