package gateway

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// target is where a request goes: a sandbox's port, and how it was
// addressed.
type target struct {
	sandboxID string
	port      int
	// prefix is the path prefix of a path-routed request
	// ("/sandboxes/<id>/ports/<port>"); empty for host routing.
	prefix string
	// path and rawPath are what the sandbox is asked for (the prefix
	// stripped).
	path, rawPath string
}

// pathRoot starts every path-routed URL.
const pathRoot = "/sandboxes/"

// parsePort reads a port number: decimal digits, no sign or leading zero,
// within events.MinPort..MaxPort.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < events.MinPort || n > events.MaxPort {
		return 0, false
	}
	return n, true
}

// hostTarget parses "<port>-<sandbox_id>.<domain>[:p]"; ok is false for
// any other host (including the domain itself).
func hostTarget(host, domain string) (target, bool) {
	if domain == "" {
		return target{}, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok || label == "" || strings.Contains(label, ".") {
		return target{}, false
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok {
		return target{}, false
	}
	port, ok := parsePort(p)
	if !ok || !events.ValidID(id) {
		return target{}, false
	}
	return target{sandboxID: id, port: port}, true
}

// isSandboxHost reports whether host is under the routing domain (a
// sandbox's host, valid or not): such a host is never path-routed.
func isSandboxHost(host, domain string) bool {
	if domain == "" {
		return false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.HasSuffix(strings.TrimSuffix(strings.ToLower(host), "."), "."+domain)
}

// pathTarget parses "/sandboxes/<id>/ports/<port>[/rest]" from the escaped
// path, so that an encoded slash in the rest stays encoded. slash reports
// whether the prefix was followed by anything ("/…"); a bare prefix is
// redirected to prefix + "/".
func pathTarget(escaped string) (t target, slash, ok bool) {
	if !strings.HasPrefix(escaped, pathRoot) {
		return target{}, false, false
	}
	parts := strings.SplitN(escaped[1:], "/", 5) // sandboxes, id, ports, port, rest
	if len(parts) < 4 || parts[0] != "sandboxes" || parts[2] != "ports" {
		return target{}, false, false
	}
	id, err := url.PathUnescape(parts[1])
	if err != nil || !events.ValidID(id) {
		return target{}, false, false
	}
	port, ok := parsePort(parts[3])
	if !ok {
		return target{}, false, false
	}
	t = target{sandboxID: id, port: port, prefix: pathRoot + id + "/ports/" + parts[3]}
	if len(parts) < 5 {
		return t, false, true
	}
	rest := "/" + parts[4]
	p, err := url.PathUnescape(rest)
	if err != nil {
		return target{}, false, false
	}
	t.path = p
	if p != rest {
		t.rawPath = rest
	}
	return t, true, true
}

// withoutParam removes every occurrence of the query parameter name from
// a raw query, keeping the others as they were (order and encoding).
func withoutParam(rawQuery, name string) (string, bool) {
	if rawQuery == "" {
		return "", false
	}
	parts := strings.Split(rawQuery, "&")
	kept := parts[:0]
	removed := false
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			removed = true
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&"), removed
}
