package cutproxy

import (
	"io"
	"net"
	"sync"
)

// Proxy is a TCP proxy to one address. Cutting it closes its connections and
// refuses new ones: what is behind it is lost without a goodbye, as in a
// crash or a network partition (the cluster tests put one on each route, the
// failover runs one between a worker and NATS).
type Proxy struct {
	l  net.Listener
	to string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// New starts a proxy on a loopback port that forwards to the address to.
func New(to string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &Proxy{l: l, to: to, conns: map[net.Conn]struct{}{}}
	k.wg.Add(1)
	go k.accept()
	return k, nil
}

// Addr is the proxy's own address (host:port).
func (k *Proxy) Addr() string { return k.l.Addr().String() }

func (k *Proxy) accept() {
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

func (k *Proxy) serve(in net.Conn) {
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

func (k *Proxy) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cut {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *Proxy) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	_ = c.Close()
}

// SetCut cuts (true) or restores (false) the Proxy.
func (k *Proxy) SetCut(cut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = cut
	if cut {
		for c := range k.conns {
			_ = c.Close()
		}
	}
}

// Close cuts the proxy, stops listening and waits for its goroutines.
func (k *Proxy) Close() {
	k.SetCut(true)
	_ = k.l.Close()
	k.wg.Wait()
}
