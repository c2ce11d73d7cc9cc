package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// An unpublished port, an unknown sandbox, another tenant's sandbox, one
// that is not running, and a URL naming no sandbox all answer one 404: the
// same status, body and headers (but Date), and nothing reaches a sandbox.
func TestNotFoundIsTheSame(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", public(8000), private(8001, tok)))
	e.put(t, sandbox("sbb", "tenant-b", public(9000)))
	gone := sandbox("sbgone", "tenant-a", public(8000))
	gone.State = events.StateGone
	e.put(t, gone)
	creating := sandbox("sbnew", "tenant-a", public(8000))
	creating.State = events.StateCreating
	e.put(t, creating)
	lost := sandbox("sblost", "tenant-a", public(8000))
	lost.State = events.StateLost
	e.put(t, lost)

	cases := []struct{ name, host, path string }{
		{"unknown sandbox by host", hostOf("nosuch", 8000), "/"},
		{"unknown sandbox by path", "", "/sandboxes/nosuch/ports/8000/"},
		{"unpublished port by host", hostOf("sba", 8002), "/"},
		{"unpublished port by path", "", "/sandboxes/sba/ports/8002/"},
		{"another tenant's sandbox, unpublished port", hostOf("sbb", 8000), "/"},
		{"gone sandbox", hostOf("sbgone", 8000), "/"},
		{"creating sandbox", hostOf("sbnew", 8000), "/"},
		{"lost sandbox", "", "/sandboxes/sblost/ports/8000/x"},
		{"port 0", "0-sba." + testDomain, "/"},
		{"port out of range", "", "/sandboxes/sba/ports/70000/"},
		{"malformed host label", "sba." + testDomain, "/"},
		{"id with a dot", "", "/sandboxes/s.a/ports/8000/"},
		{"the domain itself", testDomain, "/"},
		{"the gateway's root", "", "/"},
		{"the gateway's metrics path", "", "/metrics"},
	}
	var refBody []byte
	var refHeader http.Header
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(t, "GET", c.host, c.path, nil, nil)
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d, want 404 (body %s)", resp.StatusCode, body)
			}
			h := resp.Header.Clone()
			h.Del("Date")
			if refBody == nil {
				refBody, refHeader = body, h
				if got := events.DecodeError(body); got == nil || got.Code != events.CodePortNotExposed {
					t.Fatalf("body %s: want SBX_E1731", body)
				}
				return
			}
			if !bytes.Equal(body, refBody) {
				t.Errorf("body %q differs from %q", body, refBody)
			}
			if fmt.Sprint(h) != fmt.Sprint(refHeader) {
				t.Errorf("headers %v differ from %v", h, refHeader)
			}
		})
	}
	if n := e.up.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	if n := e.dialer.dials.Load(); n != 0 {
		t.Errorf("%d dials", n)
	}
}

// A private port without a valid credential answers one fixed 401, and
// nothing reaches the sandbox.
func TestPrivateRefusals(t *testing.T) {
	e := newEnv(t, nil)
	tok, other := newToken(t), newToken(t)
	e.put(t, sandbox("sba", "tenant-a", private(8001, tok), private(8002, other)))
	e.put(t, sandbox("sbb", "tenant-b", private(8001, other)))
	h := portauth.Hash(tok)
	now := time.Now()
	link := func(hash string, p portauth.Purpose, id string, port int, exp time.Time) string {
		return url.QueryEscape(sign(t, hash, p, id, port, exp))
	}
	cookie := func(v string) http.Header {
		return http.Header{"Cookie": {portauth.CookieName("sba", 8001) + "=" + v}}
	}
	cases := []struct {
		name string
		path string
		hdr  http.Header
	}{
		{"no credential", "/", nil},
		{"wrong token", "/", http.Header{portauth.TokenHeader: {other}}},
		{"the token's hash as token", "/", http.Header{portauth.TokenHeader: {h}}},
		{"empty token", "/", http.Header{portauth.TokenHeader: {""}}},
		{"token twice, one good", "/", http.Header{portauth.TokenHeader: {other, tok}}},
		{"token in the query", "/?" + url.Values{"token": {tok}}.Encode(), nil},
		{"expired link", "/?sbx_link=" + link(h, portauth.PurposeLink, "sba", 8001, now.Add(-time.Second)), nil},
		{"link of another port", "/?sbx_link=" + link(h, portauth.PurposeLink, "sba", 8002, now.Add(time.Minute)), nil},
		{"link of another sandbox", "/?sbx_link=" + link(h, portauth.PurposeLink, "sbb", 8001, now.Add(time.Minute)), nil},
		{"link signed with another token", "/?sbx_link=" + link(portauth.Hash(other), portauth.PurposeLink, "sba", 8001, now.Add(time.Minute)), nil},
		{"cookie value as link", "/?sbx_link=" + link(h, portauth.PurposeCookie, "sba", 8001, now.Add(time.Minute)), nil},
		{"garbage link", "/?sbx_link=x.y", nil},
		{"link value as cookie", "/", cookie(sign(t, h, portauth.PurposeLink, "sba", 8001, now.Add(time.Minute)))},
		{"expired cookie", "/", cookie(sign(t, h, portauth.PurposeCookie, "sba", 8001, now.Add(-time.Second)))},
		{"cookie of another port", "/", http.Header{"Cookie": {portauth.CookieName("sba", 8002) + "=" +
			sign(t, h, portauth.PurposeCookie, "sba", 8002, now.Add(time.Minute))}}},
		{"forged cookie", "/", cookie("9999999999.AAAA")},
		{"valid token but bad link", "/?sbx_link=x", http.Header{portauth.TokenHeader: {tok}}},
	}
	var ref []byte
	for _, c := range cases {
		for _, byPath := range []bool{false, true} {
			host, path := hostOf("sba", 8001), c.path
			if byPath {
				host, path = "", "/sandboxes/sba/ports/8001"+c.path
			}
			t.Run(fmt.Sprintf("%s/by path %v", c.name, byPath), func(t *testing.T) {
				resp, body := e.do(t, "GET", host, path, c.hdr, nil)
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401 (body %s)", resp.StatusCode, body)
				}
				switch {
				case byPath && strings.Contains(path, "sbx_link="):
					// A link on a path route: the one answer that says
					// links need host routing (pathroute_test.go).
					if !bytes.Contains(body, []byte("host routing")) {
						t.Errorf("a link on a path route: body %q", body)
					}
				case ref == nil:
					ref = body
				case !bytes.Equal(body, ref):
					t.Errorf("body %q differs from %q", body, ref)
				}
				if len(resp.Cookies()) != 0 || resp.Header.Get("WWW-Authenticate") != "" || resp.Header.Get("Location") != "" {
					t.Errorf("a 401 with hints: %v", resp.Header)
				}
			})
		}
	}
	if n := e.up.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// The token header, a signed link traded for a cookie, and that cookie
// reach a private port; rotating the token voids the cookie; the
// credentials never reach the sandbox.
func TestCredentialsAccepted(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", private(8001, tok)))
	h := portauth.Hash(tok)
	for _, byPath := range []bool{false, true} {
		t.Run(fmt.Sprintf("by path %v", byPath), func(t *testing.T) {
			host, prefix := hostOf("sba", 8001), ""
			if byPath {
				host, prefix = "", "/sandboxes/sba/ports/8001"
			}
			resp, body := e.do(t, "GET", host, prefix+"/echo", http.Header{portauth.TokenHeader: {tok}}, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("token: %d %s", resp.StatusCode, body)
			}
			if strings.Contains(string(body), tok) {
				t.Errorf("the token reached the sandbox: %s", body)
			}

			if byPath {
				// A path route takes the token header only
				// (TestPathRouteTakesTheTokenHeaderOnly); a rotation voids it.
				tok2 := newToken(t)
				e.put(t, sandbox("sba", "tenant-a", private(8001, tok2)))
				defer e.put(t, sandbox("sba", "tenant-a", private(8001, tok)))
				if resp, _ := e.do(t, "GET", host, prefix+"/echo", http.Header{portauth.TokenHeader: {tok}}, nil); resp.StatusCode != 401 {
					t.Errorf("old token after rotation: %d, want 401", resp.StatusCode)
				}
				return
			}
			lv := url.QueryEscape(sign(t, h, portauth.PurposeLink, "sba", 8001, time.Now().Add(time.Minute)))
			resp, _ = e.do(t, "GET", host, prefix+"/echo?a=1&sbx_link="+lv+"&b=%2F", nil, nil)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("link: status %d, want 303", resp.StatusCode)
			}
			if loc := resp.Header.Get("Location"); loc != prefix+"/echo?a=1&b=%2F" {
				t.Errorf("link: Location %q", loc)
			}
			cs := resp.Cookies()
			if len(cs) != 1 {
				t.Fatalf("link: cookies %v", resp.Header.Values("Set-Cookie"))
			}
			c := cs[0]
			if c.Name != portauth.CookieName("sba", 8001) || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode ||
				c.Path != "/" || c.Domain != "" || c.Secure || c.MaxAge <= 0 {
				t.Errorf("link: cookie %q", resp.Header.Get("Set-Cookie"))
			}
			// A link on a path that a browser would read as another site
			// redirects to a path on this host.
			resp, _ = e.do(t, "GET", host, prefix+"//evil.example/x?sbx_link="+lv, nil, nil)
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || strings.HasPrefix(loc, "//") {
				t.Errorf("link on //evil.example/x: %d Location %q", resp.StatusCode, loc)
			}
			ch := http.Header{"Cookie": {"theirs=1; " + c.Name + "=" + c.Value + "; mine=2"}}
			resp, body = e.do(t, "GET", host, prefix+"/echo", ch, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("cookie: %d %s", resp.StatusCode, body)
			}
			var seen struct{ Header http.Header }
			if err := json.Unmarshal(body, &seen); err != nil {
				t.Fatal(err)
			}
			if got := seen.Header.Get("Cookie"); got != "theirs=1; mine=2" {
				t.Errorf("the sandbox saw Cookie %q", got)
			}

			// Rotate: the cookie and the old token no longer work.
			tok2 := newToken(t)
			e.put(t, sandbox("sba", "tenant-a", private(8001, tok2)))
			defer e.put(t, sandbox("sba", "tenant-a", private(8001, tok)))
			if resp, _ := e.do(t, "GET", host, prefix+"/echo", ch, nil); resp.StatusCode != 401 {
				t.Errorf("cookie after rotation: %d, want 401", resp.StatusCode)
			}
			if resp, _ := e.do(t, "GET", host, prefix+"/echo", http.Header{portauth.TokenHeader: {tok}}, nil); resp.StatusCode != 401 {
				t.Errorf("old token after rotation: %d, want 401", resp.StatusCode)
			}
			if resp, _ := e.do(t, "GET", host, prefix+"/echo", http.Header{portauth.TokenHeader: {tok2}}, nil); resp.StatusCode != 200 {
				t.Errorf("new token: %d, want 200", resp.StatusCode)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// What the sandbox sees: no hop-by-hop or client forwarding header, no
// credential, the gateway's own X-Forwarded-*, the path without the
// route's prefix and the query without the link parameter.
func TestHeadersSeenByTheSandbox(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	hdr := http.Header{
		"X-Forwarded-For":     {"10.0.0.1"},
		"X-Forwarded-Host":    {"evil.example"},
		"X-Forwarded-Proto":   {"https"},
		"X-Forwarded-Prefix":  {"/evil"},
		"X-Forwarded-Server":  {"evil"},
		"Forwarded":           {"for=10.0.0.1;host=evil.example"},
		"X-Real-Ip":           {"10.0.0.1"},
		"Via":                 {"1.1 evil"},
		"Connection":          {"keep-alive, X-Drop-Me"},
		"X-Drop-Me":           {"1"},
		"Proxy-Authorization": {"Basic eDp5"},
		"Te":                  {"gzip"},
		portauth.TokenHeader:  {"sbxp_x"},
		"Cookie":              {"sbx_port_8000_sba=x; a=b"},
		"X-App":               {"kept"},
	}
	for _, c := range []struct{ name, host, path, wantHost, wantPrefix string }{
		{"by host", hostOf("sba", 8000), "/echo?q=1&sbx_link=zz", hostOf("sba", 8000), ""},
		{"by path", "", "/sandboxes/sba/ports/8000/echo?q=1&sbx_link=zz", "", "/sandboxes/sba/ports/8000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(t, "GET", c.host, c.path, hdr, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var seen struct {
				Path, Query, Host string
				Header            http.Header
			}
			if err := json.Unmarshal(body, &seen); err != nil {
				t.Fatal(err)
			}
			wantHost := cmpOr(c.wantHost, strings.TrimPrefix(e.base, "http://"))
			if seen.Path != "/echo" || seen.Query != "q=1" || seen.Host != wantHost {
				t.Errorf("path %q query %q host %q", seen.Path, seen.Query, seen.Host)
			}
			for _, k := range []string{"Forwarded", "X-Real-Ip", "Via", "X-Drop-Me", "Proxy-Authorization", "Te",
				"X-Forwarded-Server", portauth.TokenHeader} {
				if v := seen.Header.Values(k); len(v) > 0 {
					t.Errorf("the sandbox saw %s: %q", k, v)
				}
			}
			want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http",
				"X-Forwarded-Host": wantHost, "X-Forwarded-Prefix": c.wantPrefix, "Cookie": "a=b", "X-App": "kept"}
			for k, v := range want {
				if got := strings.Join(seen.Header.Values(k), ","); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
	// CONNECT and TRACE are not carried.
	for _, m := range []string{"TRACE"} {
		if resp, _ := e.do(t, m, hostOf("sba", 8000), "/echo", nil, nil); resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", m, resp.StatusCode)
		}
	}
	// An encoded slash after the prefix stays encoded.
	resp, body := e.do(t, "GET", "", "/sandboxes/sba/ports/8000/a%2Fb/echo", nil, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"raw_path":"/a%2Fb/echo"`) {
		t.Errorf("encoded slash: %d %s", resp.StatusCode, body)
	}
	// A bare prefix is redirected to prefix + "/".
	resp, _ = e.do(t, "GET", "", "/sandboxes/sba/ports/8000?x=1", nil, nil)
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "/sandboxes/sba/ports/8000/?x=1" {
		t.Errorf("bare prefix: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// A sandbox cannot set the gateway's cookies, nor cookies for other hosts
// under the domain.
func TestSandboxSetCookieSanitized(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	resp, _ := e.do(t, "GET", hostOf("sba", 8000), "/setcookie", nil, nil)
	got := resp.Header.Values("Set-Cookie")
	want := []string{"app=1; Path=/; HttpOnly", "plain=2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Set-Cookie %q, want %q", got, want)
	}
}

// Bodies past the bound are refused 413, declared or streamed.
func TestBodyTooLarge(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxRequestBody = 1 << 20 })
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	host := hostOf("sba", 8000)
	resp, body := e.do(t, "POST", host, "/upload", nil, bytes.NewReader(make([]byte, 1<<20)))
	if resp.StatusCode != 200 || string(body) != "1048576" {
		t.Fatalf("at the bound: %d %s", resp.StatusCode, body)
	}
	resp, body = e.do(t, "POST", host, "/upload", nil, bytes.NewReader(make([]byte, 1<<20+1)))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || events.DecodeError(body).Code != events.CodePayloadTooLarge {
		t.Errorf("declared: %d %s", resp.StatusCode, body)
	}
	// Chunked (no length): refused once the bound is passed.
	resp, body = e.do(t, "POST", host, "/upload", nil, io.MultiReader(bytes.NewReader(make([]byte, 2<<20))))
	if resp.StatusCode == 200 {
		t.Errorf("streamed: %d %s, want a refusal", resp.StatusCode, body)
	}
	// Headers past the bound: 431 from the server, which then closes the
	// connection with the rest of the header unread; the client may see
	// that reset before or while it reads the answer, never a 2xx.
	req, err := http.NewRequest("GET", e.base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("X-Big", strings.Repeat("x", 80<<10))
	resp, err = e.client.Do(req)
	switch {
	case err != nil:
		t.Logf("big header: the connection was reset before the answer was read: %v", err)
	case resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge:
		resp.Body.Close()
		t.Errorf("big header: %d, want 431", resp.StatusCode)
	default:
		resp.Body.Close()
	}
}

// Past the concurrent bound of a port, or of a tenant, 429.
func TestTooManyConcurrent(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxConnsPerPort = 2; c.Limits.MaxConnsPerTenant = 3 })
	e.put(t, sandbox("sba", "tenant-a", public(8000), public(8001)))
	e.put(t, sandbox("sbc", "tenant-a", public(8000)))
	e.put(t, sandbox("sbb", "tenant-b", public(8000)))
	wg := e.holdMany(t, hostOf("sba", 8000), 2, nil)
	poll.Eventually(t, 10*time.Second, poll.Bool("2 held", func() bool { return e.up.held.Load() == 2 }))
	resp, body := e.do(t, "GET", hostOf("sba", 8000), "/", nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("port bound: %d %s", resp.StatusCode, body)
	}
	wg2 := e.holdMany(t, hostOf("sba", 8001), 1, nil)
	poll.Eventually(t, 10*time.Second, poll.Bool("3 held", func() bool { return e.up.held.Load() == 3 }))
	resp, body = e.do(t, "GET", hostOf("sbc", 8000), "/", nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"limit":"tenant"`) {
		t.Errorf("tenant bound: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(t, "GET", hostOf("sbb", 8000), "/", nil, nil); resp.StatusCode != 200 {
		t.Errorf("another tenant: %d %s", resp.StatusCode, body)
	}
	close(e.up.hold)
	wg.Wait()
	wg2.Wait()
	if resp, body := e.do(t, "GET", hostOf("sba", 8000), "/", nil, nil); resp.StatusCode != 200 {
		t.Errorf("after release: %d %s", resp.StatusCode, body)
	}
}

// Errors of the dialer map to fixed answers: a port the worker does not
// publish or a gone sandbox is the one 404.
func TestDialErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.dialer.fail[8001] = events.ErrPortNotExposed
	e.dialer.fail[8002] = events.ErrSandboxGone
	e.dialer.fail[8003] = events.ErrPortUnreachable
	e.dialer.fail[8004] = events.ErrWorkerTimeout
	e.dialer.fail[8005] = events.ErrCapabilityNotSupported
	e.dialer.fail[8006] = errors.New("something else")
	e.dialer.fail[8007] = events.ErrPortReserved
	var ports []events.PortExposure
	for p := 8001; p <= 8007; p++ {
		ports = append(ports, public(p))
	}
	e.put(t, sandbox("sba", "tenant-a", ports...))
	_, ref := e.do(t, "GET", hostOf("nosuch", 8000), "/", nil, nil)
	cases := []struct {
		port   int
		status int
		code   events.Code
	}{
		{8001, 404, events.CodePortNotExposed},
		{8002, 404, events.CodePortNotExposed},
		{8003, 502, events.CodePortUnreachable},
		{8004, 504, events.CodeWorkerTimeout},
		{8005, 502, events.CodeCapabilityNotSupp},
		{8006, 502, events.CodeBackendUnavailable},
		{8007, 404, events.CodePortNotExposed},
	}
	for _, c := range cases {
		resp, body := e.do(t, "GET", hostOf("sba", c.port), "/", nil, nil)
		if resp.StatusCode != c.status || events.DecodeError(body) == nil || events.DecodeError(body).Code != c.code {
			t.Errorf("port %d: %d %s, want %d %s", c.port, resp.StatusCode, body, c.status, c.code)
		}
		if c.status == 404 && !bytes.Equal(body, ref) {
			t.Errorf("port %d: 404 body %s differs from %s", c.port, body, ref)
		}
	}
}

// A sandbox that does not answer within the bound: 504.
func TestResponseHeaderTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.ResponseHeaderTimeout = 200 * time.Millisecond })
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	resp, body := e.do(t, "GET", hostOf("sba", 8000), "/hold", nil, nil)
	if resp.StatusCode != http.StatusGatewayTimeout || events.DecodeError(body) == nil || events.DecodeError(body).Code != events.CodeWorkerTimeout {
		t.Errorf("%d %s, want 504 SBX_E1602", resp.StatusCode, body)
	}
}

// A paused sandbox's published port answers 409 (after its credential
// check for a private port).
func TestPausedSandbox(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	sb := sandbox("sba", "tenant-a", public(8000), private(8001, tok))
	sb.State = events.StatePaused
	e.put(t, sb)
	if resp, body := e.do(t, "GET", hostOf("sba", 8000), "/", nil, nil); resp.StatusCode != http.StatusConflict ||
		events.DecodeError(body) == nil || events.DecodeError(body).Code != events.CodeSandboxPaused {
		t.Errorf("public: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.do(t, "GET", hostOf("sba", 8001), "/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("private without token: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", hostOf("sba", 8001), "/", http.Header{portauth.TokenHeader: {tok}}, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("private with token: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", hostOf("sba", 8002), "/", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unpublished: %d", resp.StatusCode)
	}
}

// Server-sent events arrive as they are sent: the client reads each event
// before the next is written.
func TestServerSentEventsFlushed(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	req, _ := http.NewRequest("GET", e.base+"/sse", nil)
	req.Host = hostOf("sba", 8000)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		select {
		case e.up.sse <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d: the upstream did not ask for it", i)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: event %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		_, _ = br.ReadString('\n')
	}
}

// A request body streams to the sandbox as it is sent: the sandbox reads
// its first bytes before the client has sent the rest.
func TestRequestBodyStreamed(t *testing.T) {
	e := newEnv(t, nil)
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	pr, pw := io.Pipe()
	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.base+"/stream-in", pr)
		req.Host = hostOf("sba", 8000)
		resp, err := e.client.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{resp.StatusCode, string(b), err}
	}()
	if _, err := io.WriteString(pw, "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.up.firstBytes:
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not get the first bytes before the body ended: buffered")
	}
	_, _ = io.WriteString(pw, " world")
	_ = pw.Close()
	a := <-done
	if a.err != nil || a.status != 200 || a.body != "11" {
		t.Errorf("%d %q %v", a.status, a.body, a.err)
	}
}

// A large download arrives whole; an upgrade is a byte pipe both ways.
func TestDownloadAndUpgrade(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", public(8000), private(8001, tok)))
	resp, body := e.do(t, "GET", hostOf("sba", 8000), "/big?n=33554432", nil, nil)
	if resp.StatusCode != 200 || len(body) != 32<<20 {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(body))
	}
	for _, c := range []struct {
		name, host, path string
		hdr              http.Header
	}{
		{"public by host", hostOf("sba", 8000), "/ws", nil},
		{"private by path", e.g.Addr().String(), "/sandboxes/sba/ports/8001/ws", http.Header{portauth.TokenHeader: {tok}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, br, resp := e.upgrade(t, c.host, c.path, c.hdr)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d", resp.StatusCode)
			}
			for i := range 3 {
				msg := fmt.Sprintf("message %d\n", i)
				if _, err := io.WriteString(conn, msg); err != nil {
					t.Fatal(err)
				}
				got, err := br.ReadString('\n')
				if err != nil || got != msg {
					t.Fatalf("echo %d: %q %v", i, got, err)
				}
			}
		})
	}
	// An upgrade to a private port without the token is the one 401.
	_, _, resp = e.upgrade(t, hostOf("sba", 8001), "/ws", nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("upgrade without token: %d", resp.StatusCode)
	}
}

// Unpublishing a port, rotating its token or ending its sandbox closes
// the connections the gateway carries to it.
func TestConnectionsClosedWhenPortChanges(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	cases := []struct {
		name   string
		change func(t *testing.T)
	}{
		{"unpublished", func(t *testing.T) { e.put(t, sandbox("sba", "tenant-a")) }},
		{"token rotated", func(t *testing.T) { e.put(t, sandbox("sba", "tenant-a", private(8000, newToken(t)))) }},
		{"sandbox ended", func(t *testing.T) {
			sb := sandbox("sba", "tenant-a", private(8000, tok))
			sb.State = events.StateGone
			e.put(t, sb)
		}},
		{"record deleted", func(t *testing.T) { e.del(t, "sba") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.put(t, sandbox("sba", "tenant-a", private(8000, tok)))
			conn, br, resp := e.upgrade(t, hostOf("sba", 8000), "/ws", http.Header{portauth.TokenHeader: {tok}})
			if resp.StatusCode != 101 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			_, _ = io.WriteString(conn, "x\n")
			if s, err := br.ReadString('\n'); err != nil || s != "x\n" {
				t.Fatalf("echo: %q %v", s, err)
			}
			c.change(t)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			var ne net.Error
			if _, err := br.ReadByte(); err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after the change: %v", err)
			}
			poll.Eventually(t, 5*time.Second, poll.Bool("no connection left", func() bool {
				return e.g.pools.count(portKey{"sba", 8000}) == 0
			}))
		})
	}
}

// A quiet upgraded connection is closed after the idle bound.
func TestIdleConnectionClosed(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.IdleTimeout = 300 * time.Millisecond })
	e.put(t, sandbox("sba", "tenant-a", public(8000)))
	_, br, resp := e.upgrade(t, hostOf("sba", 8000), "/ws", nil)
	if resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	start := time.Now()
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read a byte from a quiet connection")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %s", d)
	}
}

// Requests, bytes and credential checks are counted per sandbox port, and
// a sandbox's series go with it.
func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", public(8000), private(8001, tok)))
	e.do(t, "GET", hostOf("sba", 8000), "/", nil, nil)
	e.do(t, "GET", hostOf("sba", 8001), "/", nil, nil)
	e.do(t, "GET", hostOf("sba", 8001), "/", http.Header{portauth.TokenHeader: {tok}}, nil)
	e.do(t, "GET", hostOf("made-up-id", 8001), "/", nil, nil)
	text := func() string {
		rec := &bufferRecorder{h: http.Header{}}
		e.g.MetricsHandler().ServeHTTP(rec, httptestRequest())
		return rec.b.String()
	}
	m := text()
	for _, want := range []string{
		`sandboxio_gateway_requests_total{port="8000",sandbox_id="sba",status="200"} 1`,
		`sandboxio_gateway_requests_total{port="8001",sandbox_id="sba",status="401"} 1`,
		`sandboxio_gateway_requests_total{port="8001",sandbox_id="sba",status="200"} 1`,
		`sandboxio_gateway_credentials_total{kind="none",outcome="refused",port="8001",sandbox_id="sba"} 1`,
		`sandboxio_gateway_credentials_total{kind="token",outcome="ok",port="8001",sandbox_id="sba"} 1`,
		`sandboxio_gateway_bytes_total{direction="out",port="8000",sandbox_id="sba"}`,
		`sandboxio_gateway_not_found_total 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, "made-up-id") {
		t.Error("a made-up id became a label")
	}
	e.del(t, "sba")
	poll.Eventually(t, 5*time.Second, func() error {
		if m := text(); strings.Contains(m, `sandbox_id="sba"`) {
			return fmt.Errorf("a deleted sandbox's series remain:\n%s", m)
		}
		return nil
	})
}
