package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// listen starts a loopback TCP server running serve on each connection.
func listen(t *testing.T, serve func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

func (p *peer) send(f proto.Frame) {
	p.t.Helper()
	if _, err := p.w.Write(proto.AppendFrame(nil, f)); err != nil {
		p.t.Fatalf("send %s: %v", f.Type, err)
	}
}

// streamFrame is the next frame of stream id, skipping others.
func (p *peer) streamFrame(id uint32) proto.Frame {
	p.t.Helper()
	for {
		if f := p.next(); f.Stream == id {
			return f
		}
	}
}

func decodeResult(t *testing.T, f proto.Frame) proto.Result {
	t.Helper()
	if f.Type != proto.TResult {
		t.Fatalf("frame %s, want result", f.Type)
	}
	r, err := proto.DecodeResult(f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A dial carries bytes both ways, and each side's half-close reaches the
// other: the server reads to the worker's EOF, answers, closes; the worker
// gets the answer, TEOF, then a Result without error.
func TestDialHalfClose(t *testing.T) {
	port := listen(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		_, _ = c.Write(append([]byte("echo:"), b...))
	})
	_, p := serveRaw(t, Config{})
	p.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpDial, Port: port})
	if f := p.streamFrame(1); f.Type != proto.TConnected {
		t.Fatalf("first frame %s, want connected", f.Type)
	}
	p.send(proto.Frame{Type: proto.TData, Stream: 1, Payload: []byte("hello")})
	p.send(proto.Frame{Type: proto.TEOF, Stream: 1})
	var got []byte
	var seq uint64
	for {
		f := p.streamFrame(1)
		if f.Type == proto.TWindow {
			continue
		}
		seq++
		if f.Seq != seq {
			t.Fatalf("frame %s seq %d, want %d", f.Type, f.Seq, seq)
		}
		if f.Type == proto.TEOF {
			break
		}
		if f.Type != proto.TData {
			t.Fatalf("frame %s before EOF", f.Type)
		}
		got = append(got, f.Payload...)
	}
	if string(got) != "echo:hello" {
		t.Fatalf("got %q", got)
	}
	if r := decodeResult(t, p.streamFrame(1)); r.Error != nil {
		t.Fatalf("result error %v", r.Error)
	}
}

// A port where nothing listens is refused with ErrRefused; the agent goes
// on serving.
func TestDialRefused(t *testing.T) {
	_, p := serveRaw(t, Config{})
	r := p.result(1, proto.Request{Op: proto.OpDial, Port: closedPort(t)})
	if r.Error == nil || r.Error.Kind != proto.ErrRefused {
		t.Fatalf("result %+v, want refused", r.Error)
	}
	if r := p.result(2, proto.Request{Op: proto.OpOOM}); r.Error != nil && r.Error.Kind == proto.ErrInternal {
		t.Fatalf("after a refused dial: %v", r.Error)
	}
}

// A port out of range is a protocol violation: the request never runs.
func TestDialPortOutOfRange(t *testing.T) {
	for _, port := range []int{0, -1, 65536, 1 << 40} {
		t.Run(strconv.Itoa(port), func(t *testing.T) {
			_, p := serveRaw(t, Config{})
			p.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpDial, Port: port})
			if err := p.servedErr(); !errors.Is(err, proto.ErrProtocol) {
				t.Fatalf("served: %v, want a protocol violation", err)
			}
		})
	}
}

// Dials past the connection's bound are answered ErrBusy; one that ends
// frees its place.
func TestDialBound(t *testing.T) {
	port := listen(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	s, p := serveRaw(t, Config{})
	s.maxDials = 2
	for id := uint32(1); id <= 2; id++ {
		p.sendJSON(proto.TRequest, id, proto.Request{Op: proto.OpDial, Port: port})
		if f := p.streamFrame(id); f.Type != proto.TConnected {
			t.Fatalf("dial %d: %s", id, f.Type)
		}
	}
	if r := p.result(3, proto.Request{Op: proto.OpDial, Port: port}); r.Error == nil || r.Error.Kind != proto.ErrBusy {
		t.Fatalf("third dial: %+v, want busy", r.Error)
	}
	p.send(proto.Frame{Type: proto.TCancel, Stream: 1})
	if r := decodeResult(t, p.streamFrame(1)); r.Error != nil {
		t.Fatalf("cancelled dial: %v", r.Error)
	}
	p.sendJSON(proto.TRequest, 4, proto.Request{Op: proto.OpDial, Port: port})
	if f := p.streamFrame(4); f.Type != proto.TConnected {
		t.Fatalf("dial after one ended: %s", f.Type)
	}
}

// The agent sends at most the dial's window before the worker grants
// more: a server that writes without end does not fill the worker.
func TestDialWindow(t *testing.T) {
	port := listen(t, func(c net.Conn) {
		b := bytes.Repeat([]byte("x"), 64<<10)
		for {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	})
	_, p := serveRaw(t, Config{})
	p.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpDial, Port: port})
	if f := p.streamFrame(1); f.Type != proto.TConnected {
		t.Fatalf("first frame %s", f.Type)
	}
	total := 0
	for total < dialWindow {
		f := p.streamFrame(1)
		if f.Type != proto.TData {
			t.Fatalf("frame %s", f.Type)
		}
		total += len(f.Payload)
	}
	if total != dialWindow {
		t.Fatalf("%d bytes, want exactly the window %d", total, dialWindow)
	}
	select {
	case f := <-p.frames:
		t.Fatalf("a %s frame of %d bytes past the window", f.Type, len(f.Payload))
	case <-time.After(200 * time.Millisecond):
	}
	p.send(proto.Frame{Type: proto.TWindow, Stream: 1, Payload: proto.WindowPayload(1000)})
	if f := p.streamFrame(1); f.Type != proto.TData || len(f.Payload) > 1000 {
		t.Fatalf("after 1000 bytes of credit: %s of %d", f.Type, len(f.Payload))
	}
	p.send(proto.Frame{Type: proto.TCancel, Stream: 1})
	for {
		if f := p.streamFrame(1); f.Type == proto.TResult {
			break
		}
	}
}

// The worker's data reaches the server, credited back once written; the
// server's close without reading leaves a Result, never a hang.
func TestDialServerCloses(t *testing.T) {
	got := make(chan []byte, 1)
	port := listen(t, func(c net.Conn) {
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		got <- b
	})
	_, p := serveRaw(t, Config{})
	p.sendJSON(proto.TRequest, 1, proto.Request{Op: proto.OpDial, Port: port})
	if f := p.streamFrame(1); f.Type != proto.TConnected {
		t.Fatalf("first frame %s", f.Type)
	}
	p.send(proto.Frame{Type: proto.TData, Stream: 1, Payload: []byte("abcde")})
	if b := <-got; string(b) != "abcde" {
		t.Fatalf("server got %q", b)
	}
	credited := 0
	for {
		f := p.streamFrame(1)
		switch f.Type {
		case proto.TWindow:
			credited += int(proto.WindowCredit(f))
			continue
		case proto.TEOF:
			p.send(proto.Frame{Type: proto.TEOF, Stream: 1})
			continue
		case proto.TResult:
		default:
			t.Fatalf("frame %s", f.Type)
		}
		if credited != 5 {
			t.Fatalf("credited %d, want 5", credited)
		}
		return
	}
}
