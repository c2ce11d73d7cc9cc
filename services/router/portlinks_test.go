package router_test

import (
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/services/router"
)

// TestNoLinkWithoutHostRouting: a signed link works with host routing
// only, so a router with no gateway domain (path routing alone) makes
// none: ports.token answers PortLinkUnavailable, a rotation answers the
// new token without a link, and expose works as ever.
func TestNoLinkWithoutHostRouting(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{}), Router: func(c *router.Config) {
		c.GatewayURL, c.PortLinkKey = testGatewayURL, testLinkKey
	}})
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	var exp events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, &exp); e != nil || exp.Token == "" {
		t.Fatalf("expose: %v %+v", e, exp)
	}
	var link events.PortInfo
	e := op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000}, &link)
	if e == nil || e.Code != events.CodePortLinkUnavailable {
		t.Fatalf("a link without a gateway domain: %v, link %q; want %s", e, link.Link, events.CodePortLinkUnavailable)
	}
	var rot events.PortInfo
	if e := op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000, Rotate: true}, &rot); e != nil ||
		rot.Token == "" || rot.Link != "" || rot.LinkExpires != nil {
		t.Fatalf("rotation without a gateway domain: %v %+v; want a token and no link", e, rot)
	}
}

// TestNoLinkWithoutKey: a router without a port link key makes no link
// (ports.token answers PortLinkUnavailable saying so); expose still
// answers the token.
func TestNoLinkWithoutKey(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Backend: fake.New(fake.Config{}), Router: func(c *router.Config) {
		c.GatewayURL, c.GatewayDomain = testGatewayURL, testGatewayDomain
	}})
	op := operator(t, env)
	id := op.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	var exp events.PortInfo
	if e := op.do(events.OpPortsExpose, events.PortsExposeRequest{SandboxID: id, Port: 8000}, &exp); e != nil || exp.Token == "" {
		t.Fatalf("expose: %v %+v", e, exp)
	}
	e := op.do(events.OpPortsToken, events.PortsTokenRequest{SandboxID: id, Port: 8000}, nil)
	if e == nil || e.Code != events.CodePortLinkUnavailable || !strings.Contains(e.Message, "port link key") {
		t.Fatalf("a link without a key: %v; want %s naming the key", e, events.CodePortLinkUnavailable)
	}
}
