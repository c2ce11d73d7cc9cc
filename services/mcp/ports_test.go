package mcpserver_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// noPortsBackend is the fake backend without the ports capability.
type noPortsBackend struct{ *fake.Backend }

func (b noPortsBackend) Info() worker.Info {
	i := b.Backend.Info()
	i.Capabilities = slices.DeleteFunc(slices.Clone(i.Capabilities), func(c events.Capability) bool { return c == events.CapPorts })
	return i
}

// TestExposePort: expose_port publishes a port of the session's sandbox
// and answers with what a person opens; refusals are tool errors with
// their codes.
func TestExposePort(t *testing.T) {
	sys := startOn(t, sbxtest.Options{Router: func(c *router.Config) {
		c.GatewayURL, c.GatewayDomain, c.ReservedPorts = "http://127.0.0.1:8480", "sbx.localhost", []int{22}
		c.PortLinkKey = bytes.Repeat([]byte{7}, 32)
	}}, "http")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
	base := "http://8000-" + id + ".sbx.localhost:8480/"

	got := ok(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 8000})
	for _, want := range []string{"(private)", "url: " + base, "open in a browser: " + base + "?" + events.PortLinkParam + "=",
		"token: " + events.PortTokenPrefix, "shown once"} {
		if !strings.Contains(got, want) {
			t.Errorf("expose_port: %q lacks %q", got, want)
		}
	}
	if got := ok(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 8000}); !strings.Contains(got, "token: unchanged") ||
		strings.Contains(got, events.PortTokenPrefix) {
		t.Errorf("expose_port again shows a token: %q", got)
	}
	got = ok(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 3000, "public": true})
	if !strings.Contains(got, "(public)") || !strings.Contains(got, "url: http://3000-"+id+".sbx.localhost:8480/") || strings.Contains(got, "token") {
		t.Errorf("expose_port public: %q", got)
	}
	fails(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 22}, events.CodePortReserved)
	fails(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 0}, events.CodeInvalidValue)
	fails(t, cs, "expose_port", map[string]any{"sandbox_id": "not-this-sessions", "port": 8000}, events.CodeSandboxNotFound)
}

// TestExposePortWithoutLinks: a deployment that makes no links (path
// routing only here) still publishes the port and shows its token once,
// saying why there is no link.
func TestExposePortWithoutLinks(t *testing.T) {
	sys := startOn(t, sbxtest.Options{Router: func(c *router.Config) { c.GatewayURL = "http://127.0.0.1:8480" }}, "http")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
	got := ok(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 8000})
	for _, want := range []string{"(private)", "token: " + events.PortTokenPrefix, "no browser link", "host routing"} {
		if !strings.Contains(got, want) {
			t.Errorf("expose_port: %q lacks %q", got, want)
		}
	}
}

// TestExposePortWithoutTheCapability: a backend that cannot publish ports
// answers CapabilityNotSupported.
func TestExposePortWithoutTheCapability(t *testing.T) {
	sys := startOn(t, sbxtest.Options{Backend: noPortsBackend{fake.New(fake.Config{})}}, "http")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
	fails(t, cs, "expose_port", map[string]any{"sandbox_id": id, "port": 8000}, events.CodeCapabilityNotSupp)
}
