//go:build integration

package e2bcompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestFigures measures, in one run on the same Docker sandboxes,
// create-to-first-command and a command's streamed output rate through
// the front door (HTTP: create, then Start and its first data event) and
// natively (pkg/client over NATS), alternating, for E2BCOMPAT_FIGURES=N
// rounds (skipped without it); the ratios are logged, and checked against
// the bounds the front door is held to (p50 ≤ 2x native
// create-to-first-command, ≥ 50% of native throughput).
func TestFigures(t *testing.T) {
	rounds, err := strconv.Atoi(os.Getenv("E2BCOMPAT_FIGURES"))
	if err != nil || rounds <= 0 {
		// A measurement, not a check: run it on purpose, without -race, on a
		// host that is not busy with other suites.
		t.Skip("set E2BCOMPAT_FIGURES=N (rounds) to measure")
	}
	h := startHarness(t)
	key := h.keys[authtest.TenantA]
	native := tenantClient(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const streamBytes = 32 << 20
	var doorFirst, nativeFirst []time.Duration
	var doorRate, nativeRate []float64
	for i := 0; i < rounds; i++ {
		// Front door.
		start := time.Now()
		sb := h.create(t, key, "base")
		firstAt, _ := doorStream(t, h, sb, "echo hi", 0)
		doorFirst = append(doorFirst, firstAt.Sub(start))
		_, rate := doorStream(t, h, sb, "head -c "+strconv.Itoa(streamBytes)+" /dev/zero", streamBytes)
		doorRate = append(doorRate, rate)
		h.rest(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil)

		// Native.
		start = time.Now()
		nsb, err := native.Create(ctx, events.CreateRequest{Class: "standard", TimeoutS: 300, Network: &events.NetworkPolicy{Egress: events.EgressDeny}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := nsb.Stream(ctx, []string{"/bin/bash", "-l", "-c", "echo hi"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Next(); err != nil {
			t.Fatal(err)
		}
		nativeFirst = append(nativeFirst, time.Since(start))
		_, _ = p.Wait()
		p, err = nsb.Stream(ctx, []string{"/bin/bash", "-l", "-c", "head -c " + strconv.Itoa(streamBytes) + " /dev/zero"})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		n := 0
		for c, err := range p.Chunks() {
			if err != nil {
				t.Fatal(err)
			}
			n += len(c.Data)
		}
		if n != streamBytes {
			t.Fatalf("native stream: %d bytes", n)
		}
		nativeRate = append(nativeRate, float64(n)/time.Since(t0).Seconds()/(1<<20))
		_ = nsb.Kill(ctx)
	}
	df, nf := p50(doorFirst), p50(nativeFirst)
	dr, nr := p50f(doorRate), p50f(nativeRate)
	t.Logf("create-to-first-command p50: front door %v, native %v (%.2fx) over %d rounds", df.Round(time.Millisecond), nf.Round(time.Millisecond), float64(df)/float64(nf), rounds)
	t.Logf("streamed output p50: front door %.0f MiB/s, native %.0f MiB/s (%.0f%%), %d MiB per command", dr, nr, 100*dr/nr, streamBytes>>20)
	if float64(df) > 2*float64(nf) {
		t.Errorf("create-to-first-command through the front door is %.2fx native (bound 2x)", float64(df)/float64(nf))
	}
	if dr < nr/2 {
		t.Errorf("streamed output through the front door is %.0f%% of native (bound 50%%)", 100*dr/nr)
	}
}

// doorStream runs cmd through the front door's Start and returns when the
// first data event came and the output rate in MiB/s (want bytes, when
// want > 0, are checked).
func doorStream(t *testing.T, h *harness, sb created, cmd string, want int) (time.Time, float64) {
	t.Helper()
	body, _ := json.Marshal(bash(cmd, false))
	req, _ := http.NewRequest("POST", h.srv.URL+"/process.Process/Start", bytes.NewReader(envelope(0, body)))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	var first time.Time
	n, events := 0, 0
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatalf("stream ended without end-stream: %v", err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[0] == 2 {
			break
		}
		// A data event is decoded without a JSON scanner (its form is
		// fixed); anything else goes through encoding/json.
		if b64, ok := bytes.CutPrefix(payload, []byte(`{"event":{"data":{"stdout":"`)); ok && bytes.HasSuffix(b64, []byte(`"}}}`)) {
			b, err := base64.StdEncoding.AppendDecode(nil, b64[:len(b64)-4])
			if err != nil {
				t.Fatalf("data event: %v", err)
			}
			if first.IsZero() {
				first = time.Now()
			}
			n += len(b)
			events++
			continue
		}
		var ev struct {
			Event struct {
				Data *struct {
					Stdout string `json:"stdout"`
				} `json:"data"`
			} `json:"event"`
		}
		if err := json.Unmarshal(payload, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Event.Data != nil {
			if first.IsZero() {
				first = time.Now()
			}
			b, _ := base64.StdEncoding.DecodeString(ev.Event.Data.Stdout)
			n += len(b)
			events++
		}
	}
	if os.Getenv("E2BCOMPAT_DEBUG") != "" {
		t.Logf("%s: %d data events, %v", cmd, events, time.Since(t0))
	}
	if want > 0 && n != want {
		t.Fatalf("front door stream: %d bytes, want %d", n, want)
	}
	return first, float64(n) / time.Since(t0).Seconds() / (1 << 20)
}

// tenantClient is tenant A's own client, for the native path.
func tenantClient(t *testing.T, h *harness) *client.Client {
	t.Helper()
	if h.env.Auth != nil {
		return h.env.TenantClient(authtest.TenantA)
	}
	return h.env.Client
}

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func p50f(d []float64) float64 {
	s := append([]float64(nil), d...)
	sort.Float64s(s)
	return s[len(s)/2]
}
