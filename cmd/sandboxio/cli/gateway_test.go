package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/internal/wsecho"
	"github.com/sandboxio/sandboxio/pkg/events"
)

var gatewayLine = regexp.MustCompile(`ports gateway on (http://[0-9.:]+)`)

// gatewayURL is the base URL dev printed for its gateway.
func (d *devProcess) gatewayURL(t *testing.T) string {
	t.Helper()
	var u string
	poll.Eventually(t, 30*time.Second, func() error {
		m := gatewayLine.FindStringSubmatch(d.Out.String())
		if m == nil {
			return fmt.Errorf("dev printed no gateway address: %q", d.Out.String())
		}
		u = m[1]
		return nil
	})
	return u
}

// portSandbox is a deny-egress Docker sandbox serving, through dev's
// gateway, python3 -m http.server on 8000 (private) and testdata/portpage.py
// (a page, a WebSocket echo, server-sent events) on 8001 (public) and
// 8005 (private).
type portSandbox struct {
	id, gw, token string
	dev           *devProcess
}

func startPortSandbox(t *testing.T) *portSandbox {
	t.Helper()
	needDocker(t)
	dev := startDev(t, "--backends", "docker", "--gateway", "127.0.0.1:0")
	dev.waitLive(t, "docker", "")
	gw := dev.gatewayURL(t)
	r := cli(t, dev.URL, "create", "-q", "--class", "standard", "--lifetime", "5m")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	t.Cleanup(func() { cli(t, dev.URL, "kill", id) })
	r = cli(t, dev.URL, "get", id)
	var rec events.Sandbox
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.Network == nil || rec.Network.Egress != events.EgressDeny {
		t.Fatalf("the sandbox's egress is not denied: %s %v", r.stdout, err)
	}
	if r := cli(t, dev.URL, "cp", filepath.Join("testdata", "portpage.py"), id+":/tmp"); r.code != 0 {
		t.Fatalf("cp: %+v", r)
	}
	if r := cli(t, dev.URL, "exec", id, "sh", "-c", "cd /tmp && (setsid python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && "+
		"(setsid python3 /tmp/portpage.py 8001 >/dev/null 2>&1 &) && (setsid python3 /tmp/portpage.py 8005 >/dev/null 2>&1 &)"); r.code != 0 {
		t.Fatalf("start the servers: %+v", r)
	}
	r = cli(t, dev.URL, "port", "expose", id, "8000", "--format", "{{.Token}}")
	if r.code != 0 || !strings.HasPrefix(r.stdout, portauth.TokenPrefix) {
		t.Fatalf("expose 8000: %+v", r)
	}
	ps := &portSandbox{id: id, gw: gw, token: strings.TrimSpace(r.stdout), dev: dev}
	if r := cli(t, dev.URL, "port", "expose", "--public", id, "8001"); r.code != 0 {
		t.Fatalf("expose 8001: %+v", r)
	}
	if r := cli(t, dev.URL, "port", "expose", id, "8005"); r.code != 0 {
		t.Fatalf("expose 8005: %+v", r)
	}
	// The servers take a moment to listen: 502 PortUnreachable until then.
	for _, port := range []int{8000, 8001} {
		poll.Eventually(t, 30*time.Second, func() error {
			resp, _ := ps.get(t, ps.host(port), "/", http.Header{portauth.TokenHeader: {ps.token}})
			if resp.StatusCode != 200 {
				return fmt.Errorf("port %d: %s", port, resp.Status)
			}
			return nil
		})
	}
	return ps
}

func (p *portSandbox) host(port int) string {
	return fmt.Sprintf("%d-%s.%s", port, p.id, defaultGatewayDomain)
}

// get sends GET path to the gateway with Host host ("" for the gateway's
// own address).
func (p *portSandbox) get(t *testing.T, host, path string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", p.gw+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s %s: %v", host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A deny-egress Docker sandbox's servers, reached through dev's gateway by
// host and by path: a directory listing behind a token, a public page, a
// WebSocket echo, server-sent events; what is not published is the one
// 404.
func TestGatewayDockerSandbox(t *testing.T) {
	p := startPortSandbox(t)
	tok := http.Header{portauth.TokenHeader: {p.token}}
	for _, c := range []struct {
		name, host, path string
		hdr              http.Header
		status           int
		says             string
	}{
		{"private by host", p.host(8000), "/", tok, 200, "Directory listing for /"},
		{"private by path", "", "/sandboxes/" + p.id + "/ports/8000/", tok, 200, "Directory listing for /"},
		{"private without token", p.host(8000), "/", nil, 401, "SBX_E1401"},
		{"public page by host", p.host(8001), "/", nil, 200, "served from a sandbox"},
		{"public page by path", "", "/sandboxes/" + p.id + "/ports/8001/", nil, 200, "served from a sandbox"},
		{"unpublished port", p.host(8002), "/", tok, 404, "SBX_E1731"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := p.get(t, c.host, c.path, c.hdr)
			if resp.StatusCode != c.status || !strings.Contains(body, c.says) {
				t.Errorf("%d %q, want %d with %q", resp.StatusCode, body, c.status, c.says)
			}
		})
	}
	_, unknown := p.get(t, fmt.Sprintf("8000-%s.%s", events.NewID(), defaultGatewayDomain), "/", nil)
	if _, unpublished := p.get(t, p.host(8002), "/", nil); unpublished != unknown {
		t.Errorf("unpublished port %q differs from unknown sandbox %q", unpublished, unknown)
	}

	// A WebSocket, by host and by path.
	for _, path := range []string{"/ws", "/sandboxes/" + p.id + "/ports/8001/ws"} {
		host := p.host(8001)
		if strings.HasPrefix(path, "/sandboxes/") {
			host = strings.TrimPrefix(p.gw, "http://")
		}
		c, err := net.Dial("tcp", strings.TrimPrefix(p.gw, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		ws, err := wsecho.Dial(c, host, path, nil)
		if err != nil {
			t.Fatalf("websocket %s: %v", path, err)
		}
		for i := range 3 {
			msg := fmt.Sprintf("message %d", i)
			if err := ws.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			if _, got, err := ws.Read(); err != nil || string(got) != msg {
				t.Fatalf("websocket %s echo: %q %v", path, got, err)
			}
		}
		_ = ws.Close()
	}

	// Server-sent events arrive one by one.
	req, _ := http.NewRequest("GET", p.gw+"/sse", nil)
	req.Host = p.host(8001)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var times []time.Time
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: event %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		times = append(times, time.Now())
		_, _ = br.ReadString('\n')
	}
	if d := times[2].Sub(times[0]); d < 300*time.Millisecond {
		t.Errorf("the events came together (%s apart): buffered, not streamed", d)
	}
}

// The browser check: headless Chromium loads a page served from a
// deny-egress sandbox through the gateway; the page opens a WebSocket back
// to the sandbox and shows what it received. The DOM is checked and a
// screenshot kept (SBX_BROWSER_SHOT, default .data/browser-check.png at
// the repository's root). Skipped without Chromium.
func TestBrowserCheck(t *testing.T) {
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skip("browser check skipped: no chromium (apt-get install -y chromium)")
	}
	p := startPortSandbox(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.gw, "http://"))
	for _, u := range []string{
		"http://" + p.host(8001) + ":" + port + "/",                  // host routing: *.localhost is loopback
		p.gw + "/sandboxes/" + url.PathEscape(p.id) + "/ports/8001/", // path routing
	} {
		if dom := pageShows(t, chromium, u, "received: hello through the gateway", "events: 3"); dom != "" {
			t.Errorf("%s: the page did not show the echo and the events:\n%s", u, dom)
		}
	}
	// A private port: the signed link is traded for a cookie and a
	// redirect, and the cookie lets the page and its WebSocket in.
	r := cli(t, p.dev.URL, "port", "token", "-q", p.id, "8005")
	link := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.Contains(link, "?"+portauth.LinkParam+"=") {
		t.Fatalf("port token: %+v", r)
	}
	if dom := pageShows(t, chromium, link, "received: hello through the gateway"); dom != "" {
		t.Errorf("%s: the private page did not show the echo:\n%s", link, dom)
	}
	if dom := runChromium(t, chromium, "--dump-dom", "http://"+p.host(8005)+":"+port+"/"); strings.Contains(dom, "served from a sandbox") ||
		!strings.Contains(dom, "SBX_E1401") {
		t.Errorf("the private page without the link:\n%s", dom)
	}
	shot := os.Getenv("SBX_BROWSER_SHOT")
	if shot == "" {
		shot = filepath.Join("..", "..", "..", ".data", "browser-check.png")
	}
	if err := os.MkdirAll(filepath.Dir(shot), 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(shot)
	runChromium(t, chromium, "--screenshot="+abs, "--window-size=800,400", "http://"+p.host(8001)+":"+port+"/")
	if st, err := os.Stat(abs); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", abs, err)
	}
	t.Logf("screenshot: %s", abs)
}

// pageShows loads u in headless Chromium, up to three times, until its DOM
// holds every one of want; it returns "" then, else the last DOM. (The
// page's WebSocket runs on real time beside Chromium's virtual time, which
// the page holds with a fetch in flight; a loaded machine can still end
// the budget first.)
func pageShows(t *testing.T, chromium, u string, want ...string) string {
	t.Helper()
	var dom string
	for attempt := range 3 {
		if attempt > 0 {
			t.Logf("%s: attempt %d (the last DOM lacked %q)", u, attempt+1, want)
		}
		dom = runChromium(t, chromium, "--dump-dom", u)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(dom, w)
		}
		if ok {
			return ""
		}
	}
	return dom
}

// runChromium runs headless Chromium with args after the common ones and
// returns its standard output.
func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=10000"}
	out, err := exec.CommandContext(ctx, chromium, append(base, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr)
	}
	return string(out)
}

// bench port runs its three series in this process and reports no loss.
func TestBenchPort(t *testing.T) {
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, "sandboxio", []string{"bench", "port", "-n", "50", "--size", "4MiB", "--websockets", "50", "--ws-rounds", "3",
		"--json", "--log-level", "error"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r portBenchReport
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.GatewayP50us <= 0 || r.DirectP50us <= 0 || r.GatewayMBps <= 0 || r.WSOpened != 50 || r.WSEchoed != 150 || r.WSLost != 0 {
		t.Errorf("report %+v", r)
	}
}
