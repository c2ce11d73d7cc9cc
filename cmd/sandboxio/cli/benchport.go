package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/internal/wsecho"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/gateway"
)

// portBench is `sandboxio bench port`: the gateway's own cost, measured in
// this process. A server on the host (a 1 KiB page, a download, a
// WebSocket echo) is reached directly and through a gateway that reads a
// registry on an embedded NATS server and dials the same server straight
// (no tunnel, no sandbox: what the gateway adds, beside the floor of a
// direct connection).
type portBench struct {
	Count      int   `json:"count"`
	Size       int64 `json:"download_bytes"`
	WebSockets int   `json:"websockets"`
	Rounds     int   `json:"websocket_rounds"`
}

type portBenchReport struct {
	Config          portBench `json:"config"`
	DirectP50us     float64   `json:"direct_p50_us"`
	DirectP99us     float64   `json:"direct_p99_us"`
	GatewayP50us    float64   `json:"gateway_p50_us"`
	GatewayP99us    float64   `json:"gateway_p99_us"`
	AddedP50us      float64   `json:"added_p50_us"`
	DirectMBps      float64   `json:"direct_mb_per_s"`
	GatewayMBps     float64   `json:"gateway_mb_per_s"`
	ThroughputRatio float64   `json:"throughput_ratio"`
	WSOpened        int       `json:"websockets_opened"`
	WSEchoed        int64     `json:"websocket_messages_echoed"`
	WSLost          int64     `json:"websocket_messages_lost"`
	WSSeconds       float64   `json:"websocket_seconds"`
	WSEchoP50us     float64   `json:"websocket_echo_p50_us"`
}

// hostDialer dials one address on the host for every sandbox port.
type hostDialer struct{ addr string }

func (d hostDialer) Dial(ctx context.Context, _ events.Sandbox, _ int) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

const benchSandbox, benchPort = "bench-port", 8000

func runPortBench(ctx context.Context, g *globals, cfg portBench, jsonOut bool) error {
	prog := func(format string, a ...any) {
		if !jsonOut {
			fmt.Fprintf(g.stderr, format+"\n", a...)
		}
	}
	// The server "in the sandbox", on the host.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	page := make([]byte, 1024)
	mux := http.NewServeMux()
	mux.HandleFunc("/1k", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(page) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.Handle("/ws", wsecho.Handler())
	up := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = up.Serve(ln) }()
	defer up.Close()

	dir, err := os.MkdirTemp("", "sandboxio-bench-port-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embednats.Start(embednats.Config{StoreDir: dir, DontListen: true})
	if err != nil {
		return err
	}
	defer srv.Stop()
	nc, err := srv.Connect("sandboxio-bench-port")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketRegistry})
	if err != nil {
		return err
	}
	rec, _ := json.Marshal(events.Sandbox{SandboxID: benchSandbox, State: events.StateRunning, Tenant: events.TenantOpen,
		Ports: []events.PortExposure{{Port: benchPort, Access: events.PortPublic, ExposedAt: time.Now()}}})
	if _, err := kv.Put(ctx, benchSandbox, rec); err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", Domain: defaultGatewayDomain, Dialer: hostDialer{ln.Addr().String()},
		Limits: gateway.Limits{MaxConnsPerPort: cfg.WebSockets + 64, MaxConnsPerTenant: cfg.WebSockets + 64,
			MaxIdleConnsPerPort: 256}, Logger: g.logger()}, nc)
	if err != nil {
		return err
	}
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Run(gctx) }()
	defer func() { stop(); <-done }()

	host := strconv.Itoa(benchPort) + "-" + benchSandbox + "." + defaultGatewayDomain
	direct := "http://" + ln.Addr().String()
	via := "http://" + gw.Addr().String()
	get := func(c *http.Client, base, path string) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		if err != nil {
			return 0, err
		}
		if base == via {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("%s%s: %s", base, path, resp.Status)
		}
		return n, err
	}
	// Wait for the gateway to load the registry.
	wait := time.Now().Add(10 * time.Second)
	for {
		c := &http.Client{}
		_, err := get(c, via, "/1k")
		c.CloseIdleConnections()
		if err == nil {
			break
		}
		if time.Now().After(wait) {
			return fmt.Errorf("bench port: the gateway did not serve the port within 10s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := portBenchReport{Config: cfg}

	// 1. Latency of a 1 KiB response, keep-alive, interleaved.
	prog("latency: %d requests of a 1 KiB page, direct and through the gateway, interleaved", cfg.Count)
	dc, gc := &http.Client{}, &http.Client{}
	defer dc.CloseIdleConnections()
	defer gc.CloseIdleConnections()
	var dl, gl []time.Duration
	for i := range cfg.Count + cfg.Count/10 {
		t0 := time.Now()
		if _, err := get(dc, direct, "/1k"); err != nil {
			return err
		}
		t1 := time.Now()
		if _, err := get(gc, via, "/1k"); err != nil {
			return err
		}
		t2 := time.Now()
		if i >= cfg.Count/10 { // warm-up
			dl, gl = append(dl, t1.Sub(t0)), append(gl, t2.Sub(t1))
		}
	}
	r.DirectP50us, r.DirectP99us = pct(dl, 50), pct(dl, 99)
	r.GatewayP50us, r.GatewayP99us = pct(gl, 50), pct(gl, 99)
	r.AddedP50us = r.GatewayP50us - r.DirectP50us

	// 2. One large download, each way (best of two).
	prog("throughput: one download of %d bytes, direct and through the gateway (best of 2)", cfg.Size)
	for range 2 {
		for _, base := range []string{direct, via} {
			c := &http.Client{}
			t0 := time.Now()
			n, err := get(c, base, "/big?n="+strconv.FormatInt(cfg.Size, 10))
			c.CloseIdleConnections()
			if err != nil {
				return err
			}
			mbps := float64(n) / 1e6 / time.Since(t0).Seconds()
			if base == direct {
				r.DirectMBps = max(r.DirectMBps, mbps)
			} else {
				r.GatewayMBps = max(r.GatewayMBps, mbps)
			}
		}
	}
	r.ThroughputRatio = r.GatewayMBps / r.DirectMBps

	// 3. Concurrent WebSockets through the gateway, each echoing.
	prog("websockets: %d concurrent through the gateway, %d echoes each", cfg.WebSockets, cfg.Rounds)
	gwAddr := gw.Addr().String()
	if err := wsEchoes(ctx, cfg, func() (net.Conn, error) { return net.Dial("tcp", gwAddr) }, host, "/ws", nil, &r); err != nil {
		return err
	}

	if jsonOut {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(g.stdout, "bench port: gateway vs a direct connection to the same server on the host (no tunnel)\n")
	fmt.Fprintf(g.stdout, "  1 KiB, keep-alive   direct p50 %.0f µs p99 %.0f µs · gateway p50 %.0f µs p99 %.0f µs · added p50 %.0f µs (%d requests each)\n",
		r.DirectP50us, r.DirectP99us, r.GatewayP50us, r.GatewayP99us, r.AddedP50us, len(gl))
	fmt.Fprintf(g.stdout, "  download %d MiB     direct %.0f MB/s · gateway %.0f MB/s · ratio %.2f\n",
		cfg.Size>>20, r.DirectMBps, r.GatewayMBps, r.ThroughputRatio)
	fmt.Fprintf(g.stdout, "  websockets          %d open · %d echoed · %d lost · %.2f s · echo p50 %.0f µs\n",
		r.WSOpened, r.WSEchoed, r.WSLost, r.WSSeconds, r.WSEchoP50us)
	if r.WSLost > 0 || r.WSOpened < cfg.WebSockets {
		return errors.New("bench port: websocket messages were lost")
	}
	return nil
}

// portTarget is a published port measured from outside (bench port
// --url): a deployment's gateway, its tunnel and the sandbox's server.
type portTarget struct {
	url, token, download, ws string
}

// runPortBenchURL measures a published port's URL: the p50 of GET url
// (keep-alive), one download of url's --download path, and --websockets
// concurrent WebSockets to its --ws path, each echoing --ws-rounds times.
func runPortBenchURL(ctx context.Context, g *globals, cfg portBench, pt portTarget, jsonOut bool) error {
	u, err := url.Parse(pt.url)
	if err != nil || (u.Scheme != "http") || u.Host == "" {
		return usageErr(fmt.Errorf("--url %q: an http URL of a published port", pt.url))
	}
	hostname, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
	}
	addr := net.JoinHostPort(hostname, port)
	if strings.HasSuffix(hostname, ".localhost") { // loopback, as browsers resolve it
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	hdr := http.Header{}
	if pt.token != "" {
		hdr.Set(portauth.TokenHeader, pt.token)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 4}}
	defer c.CloseIdleConnections()
	get := func(path string) (int64, error) {
		ref, err := url.Parse(path)
		if err != nil {
			return 0, err
		}
		req, err := http.NewRequestWithContext(ctx, "GET", u.ResolveReference(ref).String(), nil)
		if err != nil {
			return 0, err
		}
		req.Header = hdr.Clone()
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("GET %s: %s", req.URL, resp.Status)
		}
		return n, err
	}
	r := portBenchReport{Config: cfg}
	var lat []time.Duration
	for i := range cfg.Count + cfg.Count/10 {
		t0 := time.Now()
		if _, err := get(u.Path); err != nil {
			return err
		}
		if i >= cfg.Count/10 {
			lat = append(lat, time.Since(t0))
		}
	}
	r.GatewayP50us, r.GatewayP99us = pct(lat, 50), pct(lat, 99)
	if pt.download != "" {
		t0 := time.Now()
		n, err := get(pt.download)
		if err != nil {
			return err
		}
		r.GatewayMBps = float64(n) / 1e6 / time.Since(t0).Seconds()
	}
	if pt.ws != "" {
		if err := wsEchoes(ctx, cfg, func() (net.Conn, error) { return dial(ctx, "tcp", addr) }, u.Host, pt.ws, hdr, &r); err != nil {
			return err
		}
	}
	if jsonOut {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(g.stdout, "bench port: %s\n", pt.url)
	fmt.Fprintf(g.stdout, "  GET, keep-alive      p50 %.0f µs p99 %.0f µs (%d requests)\n", r.GatewayP50us, r.GatewayP99us, len(lat))
	if pt.download != "" {
		fmt.Fprintf(g.stdout, "  download %s  %.0f MB/s\n", pt.download, r.GatewayMBps)
	}
	if pt.ws != "" {
		fmt.Fprintf(g.stdout, "  websockets           %d open · %d echoed · %d lost · %.2f s · echo p50 %.0f µs\n",
			r.WSOpened, r.WSEchoed, r.WSLost, r.WSSeconds, r.WSEchoP50us)
		if r.WSLost > 0 || r.WSOpened < cfg.WebSockets {
			return errors.New("bench port: websocket messages were lost")
		}
	}
	return nil
}

// wsEchoes opens cfg.WebSockets WebSockets to path at host, then has each
// echo cfg.Rounds messages at once, and fills r's websocket figures.
func wsEchoes(_ context.Context, cfg portBench, dial func() (net.Conn, error), host, path string, hdr http.Header, r *portBenchReport) error {
	conns := make([]*wsecho.Conn, 0, cfg.WebSockets)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range cfg.WebSockets {
		c, err := dial()
		if err != nil {
			return fmt.Errorf("bench port: websocket %d: %w", len(conns), err)
		}
		ws, err := wsecho.Dial(c, host, path, hdr)
		if err != nil {
			_ = c.Close()
			return fmt.Errorf("bench port: websocket %d: %w", len(conns), err)
		}
		conns = append(conns, ws)
	}
	r.WSOpened = len(conns)
	var echoed, lost atomic.Int64
	var mu sync.Mutex
	var rtts []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for k := range cfg.Rounds {
				msg := []byte(fmt.Sprintf("ws %d message %d", i, k))
				t0 := time.Now()
				if ws.Write(msg) != nil {
					lost.Add(int64(cfg.Rounds - k))
					return
				}
				_, got, err := ws.Read()
				if err != nil || string(got) != string(msg) {
					lost.Add(int64(cfg.Rounds - k))
					return
				}
				mine = append(mine, time.Since(t0))
				echoed.Add(1)
			}
			mu.Lock()
			rtts = append(rtts, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.WSSeconds = time.Since(start).Seconds()
	r.WSEchoed, r.WSLost = echoed.Load(), lost.Load()
	r.WSEchoP50us = pct(rtts, 50)
	return nil
}

// pct is the p-th percentile of ds in microseconds.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds())
}
