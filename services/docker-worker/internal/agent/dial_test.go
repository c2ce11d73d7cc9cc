package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
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

// dialAgent is fakeAgent with a hello that names the dial feature.
func dialAgent(t *testing.T, script func(w net.Conn, fr *proto.Reader)) *Client {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		br := bufio.NewReader(b)
		if proto.SkipToSync(br, 1<<20) != nil {
			return
		}
		fr := proto.NewReader(br)
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		h, _ := proto.DecodeHello(f.Payload)
		p, _ := json.Marshal(proto.Hello{Version: proto.Version, Nonce: h.Nonce, Features: []string{proto.FeatureDial}})
		_, _ = b.Write(proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: p}))
		script(b, fr)
	}()
	c, err := Dial(context.Background(), a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return c
}

// An agent whose hello does not name dials is never sent one.
func TestDialNeedsTheFeature(t *testing.T) {
	c, _ := fakeAgent(t, func(net.Conn, *proto.Reader) {})
	if _, err := c.Dial(context.Background(), 80); !errors.Is(err, ErrNoDial) {
		t.Fatalf("dial: %v, want ErrNoDial", err)
	}
}

// A dial's frames out of order fail the client with ErrProtocol; a
// refusal before the connection is ErrRefused.
func TestMisbehavingDialAgent(t *testing.T) {
	connected := func(s uint32) []byte { return proto.AppendFrame(nil, proto.Frame{Type: proto.TConnected, Stream: s}) }
	eof := func(s uint32, seq uint64) []byte {
		return proto.AppendFrame(nil, proto.Frame{Type: proto.TEOF, Stream: s, Seq: seq})
	}
	// pastWindow is more data than a dial's window before any credit.
	pastWindow := func(s uint32) []byte {
		b := connected(s)
		payload := make([]byte, proto.MaxData)
		for seq := uint64(1); seq <= dialRecvWindow/proto.MaxData+1; seq++ {
			b = proto.AppendFrame(b, proto.Frame{Type: proto.TData, Stream: s, Seq: seq, Payload: payload})
		}
		return b
	}
	tests := []struct {
		name  string
		exec  bool
		reply func(s uint32) []byte
		want  error
		// unread: the test reads nothing (no credit goes back) until the
		// client has failed.
		unread bool
	}{
		{"data past the dial's window", false, pastWindow, ErrProtocol, true},
		{"connected on an exec", true, connected, ErrProtocol, false},
		{"connected twice", false, func(s uint32) []byte { return append(connected(s), connected(s)...) }, ErrProtocol, false},
		{"end of data before the connection", false, func(s uint32) []byte { return eof(s, 1) }, ErrProtocol, false},
		{"end of data out of sequence", false, func(s uint32) []byte { return append(connected(s), eof(s, 3)...) }, ErrProtocol, false},
		{"refused", false, func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.TResult, Stream: s, Payload: []byte(`{"error":{"kind":"refused","message":"x"}}`)})
		}, ErrRefused, false},
		{"unreachable", false, func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.TResult, Stream: s, Payload: []byte(`{"error":{"kind":"io","message":"i/o timeout"}}`)})
		}, ErrUnreachable, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialAgent(t, func(w net.Conn, fr *proto.Reader) {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				go func() {
					for {
						if _, err := fr.ReadFrame(); err != nil {
							return
						}
					}
				}()
				_, _ = w.Write(tc.reply(f.Stream))
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			if tc.exec {
				_, err = c.Exec(ctx, ExecRequest{Argv: []string{"true"}})
			} else {
				var d *DialConn
				if d, err = c.Dial(ctx, 80); err == nil {
					if tc.unread {
						select {
						case <-d.Done():
						case <-ctx.Done():
							t.Fatal("the client still runs after the agent's data")
						}
					}
					_, err = io.ReadAll(d)
				}
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}
