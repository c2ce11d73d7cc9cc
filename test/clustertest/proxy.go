package clustertest

import (
	"io"
	"net"
	"sync"
)

// link is a TCP proxy carrying the routes one node dials to another. Cutting
// it closes its connections and refuses new ones, so the cluster loses the
// node without a goodbye (no Raft step-down reaches the peers), as in a crash.
type link struct {
	l  net.Listener
	to string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLink(to string) (*link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &link{l: l, to: to, conns: map[net.Conn]struct{}{}}
	k.wg.Add(1)
	go k.accept()
	return k, nil
}

func (k *link) addr() string { return k.l.Addr().String() }

func (k *link) accept() {
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

func (k *link) serve(in net.Conn) {
	if !k.track(in) {
		_ = in.Close()
		return
	}
	defer k.untrack(in)
	out, err := net.Dial("tcp", k.to)
	if err != nil {
		return
	}
	if !k.track(out) {
		_ = out.Close()
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

func (k *link) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cut {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *link) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	_ = c.Close()
}

// setCut cuts (true) or restores (false) the link.
func (k *link) setCut(cut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = cut
	if cut {
		for c := range k.conns {
			_ = c.Close()
		}
	}
}

func (k *link) close() {
	k.setCut(true)
	_ = k.l.Close()
	k.wg.Wait()
}
