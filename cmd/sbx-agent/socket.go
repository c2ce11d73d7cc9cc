package main

import (
	"context"
	"log/slog"
	"os"

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
