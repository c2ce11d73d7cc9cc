package e2bapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/authtest"
)

// procEvent is one event of a Start or Connect stream.
type procEvent struct {
	Event struct {
		Start *struct {
			Pid float64 `json:"pid"`
		} `json:"start"`
		Data *struct {
			Stdout string `json:"stdout"`
		} `json:"data"`
		End *struct {
			Status string `json:"status"`
		} `json:"end"`
	} `json:"event"`
}

// openStream starts a server-streamed envd call and returns its body.
func openStream(ctx context.Context, t *testing.T, h *harness, id, token, path string, msg any) io.ReadCloser {
	t.Helper()
	b, _ := json.Marshal(msg)
	env := append([]byte{0, 0, 0, 0, 0}, b...)
	binary.BigEndian.PutUint32(env[1:], uint32(len(b)))
	req, err := http.NewRequestWithContext(ctx, "POST", h.srv.URL+path, bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("%s: %d", path, resp.StatusCode)
	}
	return resp.Body
}

// nextEvent reads one envelope; end is set for the end-stream one.
func nextEvent(t *testing.T, r io.Reader) (ev procEvent, payload []byte, end bool) {
	t.Helper()
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatalf("envelope: %v", err)
	}
	payload = make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(r, payload); err != nil {
		t.Fatalf("envelope: %v", err)
	}
	if hdr[0]&2 != 0 {
		return ev, payload, true
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatalf("event %s: %v", payload, err)
	}
	return ev, payload, false
}

// TestDropMidOutputLeavesProcessRunning: a client that drops its Start
// stream while the process is printing (every 10 ms) leaves it running;
// Connect by pid follows it to its normal exit.
func TestDropMidOutputLeavesProcessRunning(t *testing.T) {
	h := startHarness(t)
	resp, body := h.do(t, "POST", "/sandboxes", h.keys[authtest.TenantA], map[string]any{"templateID": "base", "timeout": 120})
	var sb struct{ SandboxID, EnvdAccessToken string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sctx, drop := context.WithCancel(ctx)
	defer drop()
	rd := bufio.NewReader(openStream(sctx, t, h, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Start",
		map[string]any{"process": map[string]any{"cmd": "drip", "args": []string{"100", "10"}}}))
	var pid float64
	for data := 0; data < 3; {
		ev, payload, end := nextEvent(t, rd)
		switch {
		case end || ev.Event.End != nil:
			t.Fatalf("the stream ended before the drop: %s", payload)
		case ev.Event.Start != nil:
			pid = ev.Event.Start.Pid
		case ev.Event.Data != nil:
			data++
		}
	}
	drop() // mid-output: the process prints every 10 ms

	rc := openStream(ctx, t, h, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Connect",
		map[string]any{"process": map[string]any{"pid": pid}})
	defer rc.Close()
	r := bufio.NewReader(rc)
	var out strings.Builder
	for {
		ev, payload, end := nextEvent(t, r)
		if end {
			t.Fatalf("re-attached: no end event: %s (output %q)", payload, out.String())
		}
		if ev.Event.Data != nil {
			out.WriteString(ev.Event.Data.Stdout)
		}
		if ev.Event.End != nil {
			if ev.Event.End.Status != "exit status 0" {
				t.Fatalf("re-attached: end %q, want exit status 0", ev.Event.End.Status)
			}
			return
		}
	}
}
