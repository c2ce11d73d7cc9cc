package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

const testDomain = "sbx.localhost"

// fakeDialer connects every port to one upstream address on the host, or
// fails with the error configured for the port.
type fakeDialer struct {
	addr  string
	fail  map[int]error
	dials atomic.Int64
}

func (d *fakeDialer) Dial(ctx context.Context, sb events.Sandbox, port int) (net.Conn, error) {
	d.dials.Add(1)
	if err := d.fail[port]; err != nil {
		return nil, fmt.Errorf("fake dial %s:%d: %w", sb.SandboxID, port, err)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

// upstream is the server "inside the sandbox": it answers by path.
type upstream struct {
	ln   net.Listener
	srv  *http.Server
	hits atomic.Int64
	// hold blocks /hold requests until closed; held counts those waiting.
	hold chan struct{}
	held atomic.Int64
	// sse paces /sse: one event per receive.
	sse chan struct{}
	// firstBytes is sent to when /stream-in has read its first 5 bytes.
	firstBytes chan struct{}
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln, hold: make(chan struct{}), sse: make(chan struct{}), firstBytes: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "raw_path": r.URL.RawPath,
			"query": r.URL.RawQuery, "host": r.Host, "header": r.Header})
	})
	mux.HandleFunc("/a%2Fb/echo", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "raw_path": r.URL.RawPath})
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	})
	mux.HandleFunc("/stream-in", func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.firstBytes <- struct{}{}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, 5+n)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k := min(n, len(buf))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		u.held.Add(1)
		defer u.held.Add(-1)
		select {
		case <-u.hold:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "released")
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		http.NewResponseController(w).Flush()
		for i := range 3 {
			select {
			case <-u.sse:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: event %d\n\n", i)
			http.NewResponseController(w).Flush()
		}
	})
	mux.HandleFunc("/setcookie", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "app=1; Path=/; Domain=sbx.localhost; HttpOnly")
		w.Header().Add("Set-Cookie", "sbx_port_8000_victim=forged; Path=/; Domain=sbx.localhost")
		w.Header().Add("Set-Cookie", "plain=2")
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(c, brw) // echo every byte
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the sandbox") })
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		mux.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() {
		select {
		case <-u.hold:
		default:
			close(u.hold)
		}
		_ = u.srv.Close()
	})
	return u
}

// env is a gateway on a real embedded NATS registry, with a fake dialer
// to one upstream.
type env struct {
	g      *Service
	kv     jetstream.KeyValue
	up     *upstream
	dialer *fakeDialer
	base   string // http://127.0.0.1:port
	client *http.Client
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect("gateway-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketRegistry, History: 5})
	if err != nil {
		t.Fatal(err)
	}
	up := startUpstream(t)
	d := &fakeDialer{addr: up.ln.Addr().String(), fail: map[int]error{}}
	cfg := Config{Listen: "127.0.0.1:0", Domain: testDomain, Dialer: d, PortLinkKey: testLinkKey}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg, nc)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s")
		}
	})
	poll.Eventually(t, 10*time.Second, poll.Bool("registry loaded", g.reg.loaded))
	e := &env{g: g, kv: kv, up: up, dialer: d, base: "http://" + g.Addr().String(),
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Timeout: 20 * time.Second}}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// put stores a record and waits until the gateway holds it.
func (e *env) put(t *testing.T, sb events.Sandbox) {
	t.Helper()
	b, err := json.Marshal(sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Put(context.Background(), sb.SandboxID, b); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		got, ok := e.g.reg.get(sb.SandboxID)
		if !ok {
			return fmt.Errorf("%s not in the cache", sb.SandboxID)
		}
		gb, _ := json.Marshal(got)
		if string(gb) != string(b) {
			return fmt.Errorf("%s: cache holds an older record", sb.SandboxID)
		}
		return nil
	})
}

// del removes a record and waits until the gateway drops it.
func (e *env) del(t *testing.T, id string) {
	t.Helper()
	if err := e.kv.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		if _, ok := e.g.reg.get(id); ok {
			return fmt.Errorf("%s still in the cache", id)
		}
		return nil
	})
}

// sandbox makes a running record publishing ports.
func sandbox(id, tenant string, ports ...events.PortExposure) events.Sandbox {
	return events.Sandbox{SandboxID: id, Backend: "docker", Worker: "w1", State: events.StateRunning, Tenant: tenant,
		CreatedAt: time.Unix(1_800_000_000, 0).UTC(), Ports: ports}
}

func public(port int) events.PortExposure {
	return events.PortExposure{Port: port, Access: events.PortPublic, ExposedAt: time.Unix(1_800_000_000, 0).UTC()}
}

func private(port int, token string) events.PortExposure {
	return events.PortExposure{Port: port, Access: events.PortPrivate, TokenHash: portauth.Hash(token),
		ExposedAt: time.Unix(1_800_000_000, 0).UTC()}
}

func newToken(t *testing.T) string {
	t.Helper()
	tok, err := portauth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// hostOf is a sandbox port's host-routed host.
func hostOf(id string, port int) string { return strconv.Itoa(port) + "-" + id + "." + testDomain }

// do sends a request to the gateway with Host host (empty: the
// gateway's address) and returns the response with its body read.
func (e *env) do(t *testing.T, method, host, path string, hdr http.Header, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s %s: %v", method, host, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s %s: body: %v", method, host, path, err)
	}
	return resp, b
}

// upgrade opens a raw connection through the gateway, asks for an
// upgrade of path, and returns the connection after the 101.
func (e *env) upgrade(t *testing.T, host, path string, hdr http.Header) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", e.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n", path, host)
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp
}

// holdMany starts n requests to /hold that the upstream keeps until its
// hold is closed, and waits until it holds them all.
func (e *env) holdMany(t *testing.T, host string, n int, hdr http.Header) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", e.base+"/hold", nil)
			req.Host = host
			if hdr != nil {
				req.Header = hdr.Clone()
			}
			if resp, err := e.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	return &wg
}
