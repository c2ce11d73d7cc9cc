package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

func tcpServer(t *testing.T, serve func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

// echo copies to its end, then half-closes.
func echo(c net.Conn) {
	_, _ = io.Copy(c, c)
	_ = c.(*net.TCPConn).CloseWrite()
}

// 8 MiB each way through one dial, with half-close: every byte, in order.
func TestDialEcho(t *testing.T) {
	port := tcpServer(t, echo)
	c := realPair(t)
	d, err := c.Dial(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := make([]byte, 8<<20)
	_, _ = rand.Read(want)
	go func() {
		_, _ = d.Write(want)
		_ = d.CloseWrite()
	}()
	got, err := io.ReadAll(d)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (want %d), equal %v, err %v", len(got), len(want), bytes.Equal(got, want), err)
	}
}

func TestDialRefusedAndBadPort(t *testing.T) {
	c := realPair(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	if _, err := c.Dial(context.Background(), port); !errors.Is(err, ErrRefused) {
		t.Fatalf("closed port: %v, want ErrRefused", err)
	}
	if _, err := c.Dial(context.Background(), 0); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("port 0: %v", err)
	}
	// The client goes on.
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Close unblocks a Read waiting for a server that says nothing; the
// server sees its connection end.
func TestDialCloseUnblocks(t *testing.T) {
	ended := make(chan struct{}, 2)
	port := tcpServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); ended <- struct{}{} })
	c := realPair(t)
	d, err := c.Dial(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { _, err := d.Read(make([]byte, 10)); read <- err }()
	_ = d.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read after close: no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read not unblocked by Close")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's connection did not end")
	}
	// The read deadline works on another dial.
	d2, err := c.Dial(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	_ = d2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := d2.Read(make([]byte, 10)); !errors.Is(err, errDeadline) {
		t.Fatalf("read past its deadline: %v", err)
	}
}

// 1,000 connections at once through one agent, each echoing its own
// bytes: none lost.
func TestDialThousand(t *testing.T) {
	port := tcpServer(t, echo)
	c := realPair(t)
	const n = 1000
	conns := make([]*DialConn, n)
	for i := range conns {
		d, err := c.Dial(context.Background(), port)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = d
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, d := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer d.Close()
			msg := bytes.Repeat([]byte{byte(i)}, 1000+i)
			if _, err := d.Write(msg); err != nil {
				errs <- err
				return
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(d, got); err != nil || !bytes.Equal(got, msg) {
				errs <- errors.New("echo mismatch")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

var errDeadline = os.ErrDeadlineExceeded
