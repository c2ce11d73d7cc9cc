package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/portauth"
)

// Path-routed ports share the gateway's one origin, so a browser's
// credentials there would be readable by every other sandbox's page: a
// path route takes the token header only. A signed link on it is refused
// (saying host routing is needed) without a cookie, a cookie sent to it is
// ignored, and no response on it sets a cookie, the sandbox's included.
func TestPathRouteTakesTheTokenHeaderOnly(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", private(8001, tok), public(8000)))
	now := time.Now()
	link := url.QueryEscape(sign(t, portauth.Hash(tok), portauth.PurposeLink, "sba", 8001, now.Add(time.Minute)))
	cookie := http.Header{"Cookie": {portauth.CookieName("sba", 8001) + "=" + sign(t, portauth.Hash(tok), portauth.PurposeCookie, "sba", 8001, now.Add(time.Minute))}}
	const prefix = "/sandboxes/sba/ports/8001"

	resp, body := e.do(t, "GET", "", prefix+"/echo?sbx_link="+link, nil, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Header.Values("Set-Cookie")) != 0 ||
		!strings.Contains(string(body), "host routing") {
		t.Errorf("a link on a path route: %d Set-Cookie %q body %s; want 401, no cookie, host routing named",
			resp.StatusCode, resp.Header.Values("Set-Cookie"), body)
	}
	resp, body = e.do(t, "GET", "", prefix+"/echo", cookie, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Header.Values("Set-Cookie")) != 0 {
		t.Errorf("a valid cookie on a path route: %d %s; want 401", resp.StatusCode, body)
	}
	if n := e.up.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the sandbox", n)
	}
	resp, body = e.do(t, "GET", "", prefix+"/echo", http.Header{portauth.TokenHeader: {tok}}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the token header on a path route: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.do(t, "GET", "", "/sandboxes/sba/ports/8000/setcookie", nil, nil)
	if resp.StatusCode != http.StatusOK || len(resp.Header.Values("Set-Cookie")) != 0 {
		t.Errorf("a sandbox's cookies on a path route: %d Set-Cookie %q, want none", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	// By host, the same link is traded for a cookie that works.
	resp, _ = e.do(t, "GET", hostOf("sba", 8001), "/echo?sbx_link="+link, nil, nil)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("a link by host: %d %q", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	c := resp.Cookies()[0]
	resp, body = e.do(t, "GET", hostOf("sba", 8001), "/echo", http.Header{"Cookie": {c.Name + "=" + c.Value}}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("its cookie by host: %d %s", resp.StatusCode, body)
	}
}

// testLinkKey is the port link key of the test gateways (and their
// routers).
var testLinkKey = bytes.Repeat([]byte{7}, portauth.KeySize)

// sign makes a link's or a cookie's value with testLinkKey.
func sign(t *testing.T, hash string, p portauth.Purpose, id string, port int, exp time.Time) string {
	t.Helper()
	v, err := portauth.Sign(testLinkKey, hash, p, id, port, exp)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The token's hash sits in the registry, which every services role reads:
// a link or cookie made with it alone (no port link key) is refused.
func TestCredentialFromTheRegistryRefused(t *testing.T) {
	e := newEnv(t, nil)
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", private(8001, tok)))
	forge := func(purpose string, exp time.Time) string {
		x := strconv.FormatInt(exp.Unix(), 10)
		m := hmac.New(sha256.New, []byte(portauth.Hash(tok)))
		m.Write([]byte("sandboxio-port/1\x00" + purpose + "\x00sba\x008001\x00" + x))
		return x + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	far := time.Now().Add(365 * 24 * time.Hour)
	resp, _ := e.do(t, "GET", hostOf("sba", 8001), "/echo?sbx_link="+url.QueryEscape(forge("link", far)), nil, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a link made from the registry's hash: %d Set-Cookie %q, want 401", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	resp, _ = e.do(t, "GET", hostOf("sba", 8001), "/echo", http.Header{"Cookie": {portauth.CookieName("sba", 8001) + "=" + forge("cookie", far)}}, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a cookie made from the registry's hash: %d, want 401", resp.StatusCode)
	}
	if n := e.up.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the sandbox", n)
	}
}

// A gateway without a port link key takes the token header only: a link
// (however signed) is the one 401, and a short key is refused at New.
func TestNoLinkKeyTokenOnly(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PortLinkKey = nil })
	tok := newToken(t)
	e.put(t, sandbox("sba", "tenant-a", private(8001, tok)))
	link := url.QueryEscape(sign(t, portauth.Hash(tok), portauth.PurposeLink, "sba", 8001, time.Now().Add(time.Minute)))
	if resp, _ := e.do(t, "GET", hostOf("sba", 8001), "/echo?sbx_link="+link, nil, nil); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a link without a key: %d %q, want 401", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	if resp, body := e.do(t, "GET", hostOf("sba", 8001), "/echo", http.Header{portauth.TokenHeader: {tok}}, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the token without a key: %d %s", resp.StatusCode, body)
	}
	if _, err := New(Config{Dialer: e.dialer, PortLinkKey: []byte("short")}, nil); err == nil {
		t.Error("a 5-byte port link key was accepted")
	}
}
