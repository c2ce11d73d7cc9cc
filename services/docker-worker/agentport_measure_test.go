//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/tunnel"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// portBenchServer is the HTTP server measured: /1k answers 1024 bytes,
// /big?n=N N bytes. The same static binary runs on the host (direct) and
// in the sandbox (through the tunnel and the agent).
const portBenchServer = `package main

import (
	"net/http"
	"os"
	"strconv"
	"strings"
)

func main() {
	kb := strings.Repeat("x", 1024)
	chunk := make([]byte, 256<<10)
	http.HandleFunc("/1k", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(kb)) })
	http.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= k
		}
	})
	panic(http.ListenAndServe(os.Args[1], nil))
}
`

// TestMeasurePortPath prints what a sandbox's port costs over the same
// server on the host: 1 KiB over keep-alive (p50/p90/p99), one large
// download (median of rounds), and 1,000 concurrent echo connections
// through one sandbox. It runs only with SBX_PORT_MEASURE=1:
//
//	SBX_PORT_MEASURE=1 go test -tags integration -run TestMeasurePortPath -v ./services/docker-worker/
func TestMeasurePortPath(t *testing.T) {
	if os.Getenv("SBX_PORT_MEASURE") != "1" {
		t.Skip("set SBX_PORT_MEASURE=1 to measure")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(portBenchServer), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "srv")
	build := exec.Command("go", "build", "-o", bin, "main.go")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	srvBin, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	// The host's copy.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostAddr := ln.Addr().String()
	_ = ln.Close()
	host := exec.Command(bin, hostAddr)
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })

	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: portsRouting, Logger: testLogger(t)})
	classes := []string{"standard"}
	if _, ok := b.RuntimeTier(RuntimeRunsc); ok {
		classes = append(classes, "hardened")
	}
	d, err := tunnel.NewDialer(env.Conn("gateway"), tunnel.DialerConfig{SigningSeed: env.SigningSeed("gateway")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	const n, size, rounds = 3000, 128 << 20, 5
	waitHTTP(t, direct, "http://"+hostAddr+"/1k")
	directLat := latencies(t, direct, "http://"+hostAddr+"/1k", n)
	t.Logf("1 KiB keep-alive, direct to the host's server: %s", directLat)
	for _, class := range classes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		sb, err := env.Client.Create(ctx, events.CreateRequest{Class: class, TimeoutS: 900,
			Network: &events.NetworkPolicy{Egress: events.EgressDeny}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteFile(ctx, sb.SandboxID, "/work/srv", 0o755, bytes.NewReader(srvBin), int64(len(srvBin))); err != nil {
			t.Fatal(err)
		}
		serveInSandbox(t, b, sb.SandboxID, 8000, "/work/srv", "127.0.0.1:8000")
		rec := publishPorts(t, env, sb.SandboxID, 8000)
		through := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.Dial(ctx, rec, 8000) }}}
		lat := latencies(t, through, "http://sandbox/1k", n)
		t.Logf("1 KiB keep-alive, %s sandbox through the tunnel and its agent: %s (p50 +%s)", class, lat,
			(lat.p50 - directLat.p50).Round(time.Microsecond))
		// The agent's part alone: the worker's own dial, no tunnel.
		agentOnly := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return b.DialPort(ctx, sb.SandboxID, 8000) }}}
		var dl, tl, al []float64
		for range rounds {
			dl = append(dl, download(t, direct, "http://"+hostAddr+"/big?n="+strconv.Itoa(size), size))
			tl = append(tl, download(t, through, "http://sandbox/big?n="+strconv.Itoa(size), size))
			al = append(al, download(t, agentOnly, "http://sandbox/big?n="+strconv.Itoa(size), size))
		}
		slices.Sort(dl)
		slices.Sort(tl)
		slices.Sort(al)
		t.Logf("download of %d MiB, median of %d, %s: direct %.0f MiB/s, through %.0f MiB/s (%.0f%%); the agent alone %.0f MiB/s", size>>20, rounds, class,
			dl[rounds/2], tl[rounds/2], 100*tl[rounds/2]/dl[rounds/2], al[rounds/2])
		cancel()
	}
}

func waitHTTP(t *testing.T, cl *http.Client, url string) {
	t.Helper()
	eventually(t, 10*time.Second, url, func() bool {
		resp, err := cl.Get(url)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestPortThousandConnections: 1,000 concurrent echo connections through
// one deny-egress sandbox's port, each echoing its own bytes: none lost.
func TestPortThousandConnections(t *testing.T) {
	b := newTestBackend(t, Config{})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: portsRouting, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	serveInSandbox(t, b, sb.SandboxID, 8000, "python3", "-c", `
import asyncio
async def echo(r, w):
    while True:
        b = await r.read(65536)
        if not b: break
        w.write(b); await w.drain()
    w.close()
async def main():
    s = await asyncio.start_server(echo, "127.0.0.1", 8000, backlog=2048)
    await s.serve_forever()
asyncio.run(main())
`)
	rec := publishPorts(t, env, sb.SandboxID, 8000)
	d, err := tunnel.NewDialer(env.Conn("gateway"), tunnel.DialerConfig{SigningSeed: env.SigningSeed("gateway")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const n = 1000
	conns := make([]net.Conn, n)
	start := time.Now()
	for i := range conns {
		c, err := d.Dial(ctx, rec, 8000)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = c
	}
	t.Logf("%d connections opened in %s", n, time.Since(start).Round(time.Millisecond))
	errs := make(chan error, n)
	for i, c := range conns {
		go func() {
			defer c.Close()
			msg := bytes.Repeat([]byte{byte(i)}, 1000+i)
			if _, err := c.Write(msg); err != nil {
				errs <- err
				return
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("conn %d: echo differs", i)
				return
			}
			errs <- nil
		}()
	}
	lost := 0
	for range n {
		if err := <-errs; err != nil {
			lost++
			if lost < 5 {
				t.Error(err)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d connections lost", lost, n)
	}
	t.Logf("%d connections echoed, none lost, in %s", n, time.Since(start).Round(time.Millisecond))
}

type latencyStats struct{ p50, p90, p99 time.Duration }

func (s latencyStats) String() string {
	return fmt.Sprintf("p50 %s p90 %s p99 %s", s.p50.Round(time.Microsecond), s.p90.Round(time.Microsecond), s.p99.Round(time.Microsecond))
}

// latencies GETs url n times (after a warm-up) and returns the percentiles.
func latencies(t *testing.T, cl *http.Client, url string, n int) latencyStats {
	t.Helper()
	get := func() {
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for range 200 {
		get()
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		get()
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return latencyStats{p50: lat[n/2], p90: lat[n*9/10], p99: lat[n*99/100]}
}

// download GETs url, checks it has size bytes, and returns MiB/s.
func download(t *testing.T, cl *http.Client, url string, size int64) float64 {
	t.Helper()
	start := time.Now()
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("downloaded %d of %d: %v", n, size, err)
	}
	return float64(size) / (1 << 20) / time.Since(start).Seconds()
}
