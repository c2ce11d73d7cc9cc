package failover

import (
	"io"
	"net"
	"sync"
	"testing"
)

// cutter is a TCP proxy between one process and NATS. Cutting it closes
// its connections and refuses new ones: the process is cut off from NATS
// (the rest of the system is not), as a network partition would do to it.
type cutter struct {
	l  net.Listener
	to string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, to string) *cutter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &cutter{l: l, to: to, conns: map[net.Conn]struct{}{}}
	k.wg.Add(1)
	go k.accept()
	t.Cleanup(k.close)
	return k
}

// URL is the proxy's NATS URL.
func (k *cutter) URL() string { return "nats://" + k.l.Addr().String() }

func (k *cutter) accept() {
	defer k.wg.Done()
	for {
		in, err := k.l.Accept()
		if err != nil {
			return
		}
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			k.serve(in)
		}()
	}
}

func (k *cutter) serve(in net.Conn) {
	if !k.track(in) {
		return
	}
	defer k.untrack(in)
	out, err := net.Dial("tcp", k.to)
	if err != nil {
		return
	}
	if !k.track(out) {
		return
	}
	defer k.untrack(out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

func (k *cutter) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cut {
		_ = c.Close()
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *cutter) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	_ = c.Close()
}

// setCut cuts (true) or restores (false) the link.
func (k *cutter) setCut(cut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = cut
	if cut {
		for c := range k.conns {
			_ = c.Close()
		}
	}
}

func (k *cutter) close() {
	k.setCut(true)
	_ = k.l.Close()
	k.wg.Wait()
}
