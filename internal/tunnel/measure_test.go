package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMeasure prints what the tunnel adds over a direct connection to the
// same HTTP server on this host (docs/adr/0050-ports-over-the-agent-channel.md):
// a 1 KiB response over keep-alive (p50/p90/p99) and one large download. It
// runs only with SBX_TUNNEL_MEASURE=1:
//
//	SBX_TUNNEL_MEASURE=1 go test -run TestMeasure -v ./internal/tunnel/
func TestMeasure(t *testing.T) {
	if os.Getenv("SBX_TUNNEL_MEASURE") != "1" {
		t.Skip("set SBX_TUNNEL_MEASURE=1 to measure")
	}
	port := httpServer(t)
	window, _ := strconv.Atoi(os.Getenv("SBX_TUNNEL_WINDOW"))
	r := newRig(t, rigOptions{server: ServerConfig{Window: window}, dialer: DialerConfig{Window: window}})
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	through := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return r.dialer.Dial(ctx, record(port), port)
		}}}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	const n = 5000
	for _, c := range []struct {
		name string
		cl   *http.Client
	}{{"direct", direct}, {"tunnel", through}} {
		lat := Latencies(t, c.cl, url+"/1k", n)
		t.Logf("1 KiB keep-alive, %s: %s", c.name, lat)
	}
	// Downloads alternate between the two paths, and each path's median
	// of the rounds counts: the machine's load moves both alike.
	const size, rounds = 256 << 20, 5
	var d, tn []float64
	for range rounds {
		d = append(d, Download(t, direct, url+"/big?n="+strconv.Itoa(size), size))
		tn = append(tn, Download(t, through, url+"/big?n="+strconv.Itoa(size), size))
	}
	slices.Sort(d)
	slices.Sort(tn)
	t.Logf("download of %d MiB, median of %d: direct %.0f MiB/s, tunnel %.0f MiB/s (%.0f%%)", size>>20, rounds,
		d[rounds/2], tn[rounds/2], 100*tn[rounds/2]/d[rounds/2])
}

// httpServer serves /1k (1024 bytes) and /big?n=N (N bytes) on loopback.
func httpServer(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kb := strings.Repeat("x", 1024)
	chunk := make([]byte, 256<<10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/1k" {
			_, _ = io.WriteString(w, kb)
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= k
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// LatencyStats are a run's percentiles.
type LatencyStats struct{ P50, P90, P99 time.Duration }

func (s LatencyStats) String() string {
	return fmt.Sprintf("p50 %s p90 %s p99 %s", s.P50.Round(time.Microsecond), s.P90.Round(time.Microsecond), s.P99.Round(time.Microsecond))
}

// Latencies GETs url n times (after a warm-up) and returns the percentiles.
func Latencies(t testing.TB, cl *http.Client, url string, n int) LatencyStats {
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
	return LatencyStats{P50: lat[n/2], P90: lat[n*9/10], P99: lat[n*99/100]}
}

// Download GETs url, checks it has size bytes, and returns MiB/s.
func Download(t testing.TB, cl *http.Client, url string, size int64) float64 {
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
