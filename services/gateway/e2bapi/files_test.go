package e2bapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/services/gateway/e2bapi"
)

// createFor creates a sandbox for tenant through the front door and
// returns its id and envd access token.
func (h *harness) createFor(t *testing.T, tenant string) (id, token string) {
	t.Helper()
	resp, body := h.do(t, "POST", "/sandboxes", h.keys[tenant], map[string]any{"templateID": "base", "timeout": 120})
	var sb map[string]any
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	return sb["sandboxID"].(string), sb["envdAccessToken"].(string)
}

// trickle opens an octet-stream upload of size bytes to path on srv and
// sends only its header and first byte; the connection closes when the
// test ends.
func trickle(t *testing.T, srv *httptest.Server, id, token, path string, size int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := fmt.Sprintf("POST /files?username=user&path=%s HTTP/1.1\r\nHost: gw\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 49983\r\n"+
		"X-Access-Token: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\nx", path, id, token, size)
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	return c
}

// upload sends a whole octet-stream upload and returns its status.
func upload(ctx context.Context, srv *httptest.Server, id, token, path, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/files?username=user&path="+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// TestFilesSlotsPerTenant: one tenant holding eight uploads whose bodies
// never come leaves another tenant's upload its turn.
func TestFilesSlotsPerTenant(t *testing.T) {
	h := startHarness(t)
	idA, tokA := h.createFor(t, authtest.TenantA)
	idB, tokB := h.createFor(t, authtest.TenantB)
	for i := range 8 {
		trickle(t, h.srv, idA, tokA, fmt.Sprintf("/tmp/slow%d", i), 1000)
	}
	waitFor(t, 10*time.Second, "tenant A's 8 uploads at /files", func() bool { return e2bapi.FilesActive(h.api) == 8 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, err := upload(ctx, h.srv, idB, tokB, "/tmp/b.txt", "tenant b")
	if err != nil || status != http.StatusOK {
		t.Fatalf("tenant B's upload while tenant A trickles 8: %d %v, want 200", status, err)
	}
}

// TestFilesTrickledBodyEnds: an upload whose body does not arrive within
// TransferTimeout is answered 408 and frees its slot.
func TestFilesTrickledBodyEnds(t *testing.T) {
	h := startHarness(t)
	id, tok := h.createFor(t, authtest.TenantA)
	const limit = 500 * time.Millisecond
	api, err := e2bapi.New(e2bapi.Config{Conn: h.env.Conn("e2b-frontdoor-2"), TokenKey: []byte("test key"),
		Templates: map[string]e2bapi.Template{"base": {Class: "fake"}}, TransferTimeout: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close) // after trickle's connection closes

	start := time.Now()
	c := trickle(t, srv, id, tok, "/tmp/slow", 1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // one byte every 100 ms, until the connection or the test ends
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)

	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("a body trickled for %s was still being read (TransferTimeout %s)", time.Since(start).Round(time.Millisecond), limit)
	case err == nil:
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("trickled upload: status %d, want 408", resp.StatusCode)
		}
	default:
		t.Logf("the connection was cut instead of answered: %v", err)
	}
	if d := time.Since(start); d > limit+3*time.Second {
		t.Fatalf("trickled upload ended after %s, TransferTimeout %s", d, limit)
	}
	waitFor(t, 5*time.Second, "the slot's release", func() bool { return e2bapi.FilesActive(api) == 0 })
}

// TestFilesUntakenDownloadEnds: a download its client does not read frees
// its slot after TransferTimeout.
func TestFilesUntakenDownloadEnds(t *testing.T) {
	h := startHarness(t)
	id, tok := h.createFor(t, authtest.TenantA)
	const limit = 500 * time.Millisecond
	api, err := e2bapi.New(e2bapi.Config{Conn: h.env.Conn("e2b-frontdoor-2"), TokenKey: []byte("test key"),
		Templates: map[string]e2bapi.Template{"base": {Class: "fake"}}, TransferTimeout: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := strings.Repeat("0123456789abcdef", 1<<20) // 16 MiB: more than the sockets' buffers
	if status, err := upload(ctx, srv, id, tok, "/tmp/big", big); err != nil || status != http.StatusOK {
		t.Fatalf("upload: %d %v", status, err)
	}

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10)
	}
	req := fmt.Sprintf("GET /files?username=user&path=/tmp/big HTTP/1.1\r\nHost: gw\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: %s\r\n\r\n", id, tok)
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the download at /files", func() bool { return e2bapi.FilesActive(api) == 1 })
	waitFor(t, limit+5*time.Second, "the untaken download's end", func() bool { return e2bapi.FilesActive(api) == 0 })
}
