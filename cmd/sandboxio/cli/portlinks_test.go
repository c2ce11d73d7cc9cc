package cli

import (
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestPortExposeWithoutLinks: a router with no port link key makes no
// links; port expose still publishes the port and prints its token (shown
// once), saying on stderr why there is no link.
func TestPortExposeWithoutLinks(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Listen: true, Router: func(c *router.Config) {
		c.GatewayURL, c.GatewayDomain = "http://127.0.0.1:8480", "sbx.localhost"
	}})
	var creds []string
	if env.Auth != nil {
		creds = []string{"--creds", env.Auth.TenantCreds(authtest.TenantA)}
	}
	r := cli(t, env.URL, append(creds, "create", "-q", "--lifetime", "5m")...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !events.ValidID(id) {
		t.Fatalf("create: %+v", r)
	}
	r = cli(t, env.URL, append(creds, "port", "expose", id, "8000")...)
	if r.code != 0 || !strings.Contains(r.stdout, "token     "+events.PortTokenPrefix) ||
		!strings.Contains(r.stderr, "no browser link") || !strings.Contains(r.stderr, "port link key") {
		t.Fatalf("port expose without a link key:\n%+v", r)
	}
}
