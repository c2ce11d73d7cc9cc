package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/router"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestPorts: the client's port calls, through a handle and by id, and the
// errors they map to.
func TestPorts(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{Router: func(c *router.Config) {
		c.GatewayURL, c.ReservedPorts = "https://gw.example:8443/", []int{2222}
	}})
	sb, err := env.Client.Create(ctx(t), events.CreateRequest{}, client.WithLifetime(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.ExposePort(ctx(t), 8000, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Access != events.PortPrivate || !strings.HasPrefix(p.Token, events.PortTokenPrefix) || p.URL != "" ||
		p.PathURL != "https://gw.example:8443/sandboxes/"+sb.ID()+"/ports/8000/" {
		t.Fatalf("expose: %+v", p)
	}
	if _, err := env.Client.ExposePort(ctx(t), sb.ID(), 3000, events.PortPublic); err != nil {
		t.Fatal(err)
	}
	ports, err := sb.ListPorts(ctx(t))
	if err != nil || len(ports) != 2 || ports[0].Port != 3000 || ports[1].Token != "" {
		t.Fatalf("ports: %v %+v", err, ports)
	}
	// Path routing only: no link (links work with host routing only).
	if _, err := env.Client.PortToken(ctx(t), events.PortsTokenRequest{SandboxID: sb.ID(), Port: 8000, LinkTTLS: 30}); !errors.Is(err, events.ErrPortLinkUnavailable) {
		t.Fatalf("link: %v, want PortLinkUnavailable", err)
	}
	rot, err := env.Client.PortToken(ctx(t), events.PortsTokenRequest{SandboxID: sb.ID(), Port: 8000, Rotate: true})
	if err != nil || rot.Token == "" || rot.Token == p.Token {
		t.Fatalf("rotate: %v %+v", err, rot)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"reserved", func() error { _, err := sb.ExposePort(ctx(t), 2222, ""); return err }(), events.ErrPortReserved},
		{"bad port", func() error { _, err := sb.ExposePort(ctx(t), 0, ""); return err }(), events.ErrInvalidValue},
		{"not published", func() error {
			_, err := env.Client.PortToken(ctx(t), events.PortsTokenRequest{SandboxID: sb.ID(), Port: 9000})
			return err
		}(), events.ErrPortNotExposed},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	un, err := sb.UnexposePort(ctx(t), 8000)
	if err != nil || !un.WasExposed {
		t.Fatalf("unexpose: %v %+v", err, un)
	}
	// Ports listed at create come back in its reply.
	sb2, err := env.Client.Create(ctx(t), events.CreateRequest{Ports: []events.PortSpec{{Port: 8080}}}, client.WithLifetime(time.Minute))
	if err != nil || len(sb2.Ports) != 1 || sb2.Ports[0].Token == "" {
		t.Fatalf("create with ports: %v %+v", err, sb2)
	}
}
