package gateway

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Credential kinds, as metrics and logs name them.
const (
	credToken  = "token"
	credLink   = "link"
	credCookie = "cookie"
	credNone   = "none"
)

// cookiePrefix starts every cookie of the gateway (portauth.CookieName);
// none reaches a sandbox, and none may be set by one.
const cookiePrefix = "sbx_port_"

// authorize checks a private port's credential. It returns true when the
// request may go on; otherwise it has answered (401, or the redirect that
// follows a valid link).
//
// A path-routed request takes the token header only: every sandbox's path
// route shares this gateway's one origin, where a browser's link cookie
// would be readable by any other sandbox's page. So a link there is
// refused (saying that host routing is needed) and a cookie ignored; no
// cookie is ever set there.
func (g *Service) authorize(w http.ResponseWriter, r *http.Request, t target, exp events.PortExposure) bool {
	now := time.Now()
	id, port := t.sandboxID, t.port
	pathRouted := t.prefix != ""
	if q := r.URL.Query(); q.Has(portauth.LinkParam) {
		if pathRouted {
			g.metrics.credential(id, port, credLink, "refused")
			g.metrics.request(id, port, http.StatusUnauthorized)
			g.tokenLog.log(g.log, "port link on a path route refused", "sandbox_id", id, "port", port, "client", clientIP(r))
			writeBody(w, http.StatusUnauthorized, linkOnPathBody)
			return false
		}
		if portauth.Verify(g.cfg.PortLinkKey, q.Get(portauth.LinkParam), exp.TokenHash, portauth.PurposeLink, id, port, now, events.MaxPortLinkTTL) != nil {
			g.refuse(w, r, t, credLink)
			return false
		}
		value, err := portauth.Sign(g.cfg.PortLinkKey, exp.TokenHash, portauth.PurposeCookie, id, port, now.Add(g.cfg.CookieTTL))
		if err != nil { // no key: Verify has refused already
			g.refuse(w, r, t, credLink)
			return false
		}
		g.metrics.credential(id, port, credLink, "ok")
		g.tokenLog.log(g.log, "port link traded for a cookie", "sandbox_id", id, "port", port, "client", clientIP(r))
		http.SetCookie(w, &http.Cookie{
			Name:     portauth.CookieName(id, port),
			Value:    value,
			Path:     "/",
			MaxAge:   int(g.cfg.CookieTTL / time.Second),
			HttpOnly: true,
			Secure:   g.https(r),
			SameSite: http.SameSiteLaxMode,
		})
		// The same path, as a path on this host: "//host/…" or "/\\…"
		// would be another site to a browser.
		loc := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/\\")
		if rest, _ := withoutParam(r.URL.RawQuery, portauth.LinkParam); rest != "" {
			loc += "?" + rest
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		http.Redirect(w, r, loc, http.StatusSeeOther)
		g.metrics.request(id, port, http.StatusSeeOther)
		return false
	}
	if vals := r.Header.Values(portauth.TokenHeader); len(vals) > 0 {
		if len(vals) == 1 && portauth.CheckToken(vals[0], exp.TokenHash) {
			g.metrics.credential(id, port, credToken, "ok")
			return true
		}
		g.refuse(w, r, t, credToken)
		return false
	}
	name, sawCookie := portauth.CookieName(id, port), false
	for _, c := range r.Cookies() {
		if pathRouted || c.Name != name {
			continue
		}
		sawCookie = true
		if portauth.Verify(g.cfg.PortLinkKey, c.Value, exp.TokenHash, portauth.PurposeCookie, id, port, now, g.cfg.CookieTTL) == nil {
			g.metrics.credential(id, port, credCookie, "ok")
			return true
		}
	}
	if sawCookie {
		g.refuse(w, r, t, credCookie)
	} else {
		g.refuse(w, r, t, credNone)
	}
	return false
}

// refuse answers the one 401, and counts and logs the refusal.
func (g *Service) refuse(w http.ResponseWriter, r *http.Request, t target, kind string) {
	g.metrics.credential(t.sandboxID, t.port, kind, "refused")
	g.metrics.request(t.sandboxID, t.port, http.StatusUnauthorized)
	g.tokenLog.log(g.log, "port credential refused", "sandbox_id", t.sandboxID, "port", t.port, "credential", kind, "client", clientIP(r))
	writeUnauthorized(w)
}

// https reports whether the client reached the gateway over TLS (or the
// gateway is configured to say so behind a TLS terminator).
func (g *Service) https(r *http.Request) bool { return r.TLS != nil || g.cfg.PublicHTTPS }

// stripCredentials removes the gateway's credentials from a request bound
// for a sandbox: the token header and the gateway's cookies.
func stripCredentials(h http.Header) {
	h.Del(portauth.TokenHeader)
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for _, part := range strings.Split(line, ";") {
			p := strings.TrimSpace(part)
			if p == "" || strings.HasPrefix(strings.ToLower(p), cookiePrefix) {
				continue
			}
			kept = append(kept, p)
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// modifyResponse sanitizes a sandbox's cookies (sanitizeSetCookies) on a
// host route, and drops them all on a path route: there every sandbox
// shares one origin, so a cookie one sets could reach another's paths.
func modifyResponse(r *http.Response) error {
	if t, _ := r.Request.Context().Value(targetKey{}).(target); t.prefix != "" {
		r.Header.Del("Set-Cookie")
		return nil
	}
	sanitizeSetCookies(r.Header)
	return nil
}

// sanitizeSetCookies drops a sandbox's Set-Cookie headers that name a
// gateway cookie, and removes the Domain attribute of the others, so that
// one sandbox's host cannot set cookies on another's.
func sanitizeSetCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		name, _, _ := strings.Cut(line, "=")
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), cookiePrefix) {
			continue
		}
		parts := strings.Split(line, ";")
		out := parts[:1]
		for _, a := range parts[1:] {
			k, _, _ := strings.Cut(strings.TrimSpace(a), "=")
			if strings.EqualFold(strings.TrimSpace(k), "domain") {
				continue
			}
			out = append(out, a)
		}
		kept = append(kept, strings.Join(out, ";"))
	}
	h.Del("Set-Cookie")
	for _, l := range kept {
		h.Add("Set-Cookie", l)
	}
}

// rateLog logs at most perSecond lines a second and counts the rest,
// which the next line that passes reports as "suppressed".
type rateLog struct {
	perSecond int

	mu         sync.Mutex
	window     int64
	n          int
	suppressed int
}

func (l *rateLog) log(log interface {
	Info(msg string, args ...any)
}, msg string, args ...any) {
	now := time.Now().Unix()
	l.mu.Lock()
	if now != l.window {
		l.window, l.n = now, 0
	}
	if l.n >= l.perSecond {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.n++
	sup := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if sup > 0 {
		args = append(args, "suppressed", sup)
	}
	log.Info(msg, args...)
}
