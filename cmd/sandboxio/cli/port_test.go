package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/internal/authtest"
	"github.com/sandboxio/sandboxio/internal/portauth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestPortCommands: port expose, ls, token and rm, as a user runs them.
func TestPortCommands(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Listen: true, Router: func(c *router.Config) {
		c.GatewayURL, c.GatewayDomain, c.ReservedPorts = "http://127.0.0.1:8480", "sbx.localhost", []int{22}
		c.PortLinkKey = bytes.Repeat([]byte{7}, portauth.KeySize)
	}})
	var creds []string
	if env.Auth != nil {
		creds = []string{"--creds", env.Auth.TenantCreds(authtest.TenantA)}
	}
	port := func(args ...string) result {
		t.Helper()
		return cli(t, env.URL, append(append(creds, "port"), args...)...)
	}
	r := cli(t, env.URL, append(creds, "create", "-q", "--lifetime", "5m")...)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !events.ValidID(id) {
		t.Fatalf("create: %+v", r)
	}
	base := "http://8000-" + id + ".sbx.localhost:8480/"

	// A private port: its token (once) and a link that opens in a browser.
	r = port("expose", id, "8000")
	if r.code != 0 || !strings.Contains(r.stdout, "url       "+base) || !strings.Contains(r.stdout, "token     "+portauth.TokenPrefix) ||
		!strings.Contains(r.stdout, "link      "+base+"?"+portauth.LinkParam+"=") {
		t.Fatalf("port expose:\n%+v", r)
	}
	r = port("expose", "-q", id, "3000", "--public")
	if r.code != 0 || r.stdout != "http://3000-"+id+".sbx.localhost:8480/\n" {
		t.Fatalf("port expose -q --public: %+v", r)
	}
	r = port("ls", id)
	if r.code != 0 || !strings.Contains(r.stdout, "PORT") || !strings.Contains(r.stdout, "3000  public") || !strings.Contains(r.stdout, "8000  private  "+base) ||
		strings.Contains(r.stdout, portauth.TokenPrefix) {
		t.Fatalf("port ls:\n%+v", r)
	}
	if r = port("ls", "-q", id); r.stdout != "3000\n8000\n" {
		t.Fatalf("port ls -q: %+v", r)
	}
	var list []events.PortInfo
	if r = port("ls", "--format", "json", id); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list) != 2 {
		t.Fatalf("port ls --format json: %+v", r)
	}
	var rot events.PortInfo
	if r = port("token", "--rotate", "--link-ttl", "60", "--format", "json", id, "8000"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &rot) != nil ||
		!strings.HasPrefix(rot.Token, portauth.TokenPrefix) || !strings.HasPrefix(rot.Link, base+"?") {
		t.Fatalf("port token --rotate: %+v", r)
	}
	if r = port("token", "-q", id, "8000"); r.code != 0 || !strings.HasPrefix(r.stdout, base+"?"+portauth.LinkParam+"=") {
		t.Fatalf("port token -q: %+v", r)
	}

	// Refusals, with their codes and exit statuses.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"expose", id, "22"}, exitSBXError, string(events.CodePortReserved)},
		{[]string{"expose", id, "http"}, exitUsage, "is not a port"},
		{[]string{"expose", id, "70000"}, exitUsage, "is not a port"},
		{[]string{"token", id, "9000"}, exitSBXError, string(events.CodePortNotExposed)},
		{[]string{"token", id, "3000"}, exitSBXError, string(events.CodeInvalidValue)},
		{[]string{"token", "--link-ttl", "25h", id, "8000"}, exitUsage, "out of range"},
		{[]string{"expose", id}, exitUsage, "accepts 2 arg"},
	} {
		if r := port(tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("port %v: %+v, want exit %d and %q", tc.args, r, tc.code, tc.want)
		}
	}

	// Each subcommand's help example runs and prints something.
	example := regexp.MustCompile(`'(\{\{[^']*\}\})'`)
	for _, args := range [][]string{{"expose", id, "8000"}, {"ls", id}, {"token", id, "8000"}} {
		help := port(args[0], "--help")
		m := example.FindStringSubmatch(help.stdout)
		if m == nil {
			t.Fatalf("port %s --help has no --format example", args[0])
		}
		r := port(append([]string{args[0], "--format", m[1]}, args[1:]...)...)
		if r.code != 0 || strings.TrimSpace(r.stdout) == "" || strings.Contains(r.stdout, "<no value>") {
			t.Errorf("port %s --format '%s' (its help's example): %+v", args[0], m[1], r)
		}
	}

	// create and run publish --port once the sandbox runs and say where.
	r = cli(t, env.URL, append(creds, "create", "-q", "--lifetime", "5m", "--port", "8000", "--port", "3000:public")...)
	id2 := strings.TrimSpace(r.stdout)
	if r.code != 0 || !events.ValidID(id2) ||
		!strings.Contains(r.stderr, "port 8000 (private): open http://8000-"+id2+".sbx.localhost:8480/?"+portauth.LinkParam+"=") ||
		!strings.Contains(r.stderr, "port 8000 token (shown once; send it as X-Sbx-Port-Token): "+portauth.TokenPrefix) ||
		!strings.Contains(r.stderr, "port 3000 (public): http://3000-"+id2+".sbx.localhost:8480/\n") {
		t.Fatalf("create --port:\n%+v", r)
	}
	if r = port("ls", "-q", id2); r.stdout != "3000\n8000\n" {
		t.Fatalf("the create's ports: %+v", r)
	}
	r = cli(t, env.URL, append(creds, "run", "--port", "8000:public", "--", "echo", "hi")...)
	if r.code != 0 || r.stdout != "hi\n" || !strings.Contains(r.stderr, "port 8000 (public): http://8000-") {
		t.Fatalf("run --port: %+v", r)
	}
	for _, bad := range []string{"x", "8000:open", "0", "8000:"} {
		if r := cli(t, env.URL, append(creds, "create", "--port", bad)...); r.code != exitUsage || !strings.Contains(r.stderr, "want PORT or PORT:public") {
			t.Errorf("create --port %s: %+v", bad, r)
		}
	}

	if r = port("rm", id, "8000"); r.code != 0 || r.stderr != "" {
		t.Fatalf("port rm: %+v", r)
	}
	if r = port("rm", id, "8000"); r.code != 0 || !strings.Contains(r.stderr, "was not published") {
		t.Fatalf("port rm again: %+v", r)
	}
	if r = port("ls", "-q", id); r.stdout != "3000\n" {
		t.Fatalf("port ls -q after rm: %+v", r)
	}
}

// TestDevPorts: `sandboxio dev` publishes ports with the gateway's
// addresses and refuses the ports given to --reserved-ports.
func TestDevPorts(t *testing.T) {
	dev := startDev(t, "--backends", "fake", "--reserved-ports", "2222, 2375", "--gateway", "127.0.0.1:0")
	dev.waitLive(t, "fake", "")
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)
	r := cli(t, dev.URL, "port", "expose", "--public", "--format", "{{.URL}} {{.PathURL}}", id, "8000")
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 2 || !strings.HasPrefix(f[0], "http://8000-"+id+".sbx.localhost:") || !strings.HasSuffix(f[1], "/sandboxes/"+id+"/ports/8000/") {
		t.Fatalf("port expose on dev: %+v", r)
	}
	for _, p := range []string{"2222", "2375"} {
		if r := cli(t, dev.URL, "port", "expose", id, p); r.code != exitSBXError || !strings.Contains(r.stderr, string(events.CodePortReserved)) {
			t.Errorf("port expose %s (reserved): %+v", p, r)
		}
	}
	if r := cli(t, dev.URL, "dev", "--reserved-ports", "ssh"); r.code != exitUsage {
		t.Errorf("dev --reserved-ports ssh: %+v", r)
	}
}
