package router

import (
	"errors"
	"slices"
	"testing"
)

func TestPortURLs(t *testing.T) {
	for _, tc := range []struct {
		name, gw, domain string
		url, path        string
	}{
		{"both", "http://127.0.0.1:8480", "sbx.localhost", "http://8000-sb1.sbx.localhost:8480/", "http://127.0.0.1:8480/sandboxes/sb1/ports/8000/"},
		{"https on its default port", "https://gw.example.com/", "ports.example.com", "https://8000-sb1.ports.example.com/", "https://gw.example.com/sandboxes/sb1/ports/8000/"},
		{"a path prefix", "https://example.com/gw/", "", "", "https://example.com/gw/sandboxes/sb1/ports/8000/"},
		{"a domain only", "", "sbx.localhost", "http://8000-sb1.sbx.localhost/", ""},
		{"none", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{cfg: Config{GatewayURL: tc.gw, GatewayDomain: tc.domain}}
			if err := checkGatewayConfig(s.cfg); err != nil {
				t.Fatal(err)
			}
			if u, p := s.portURLs("sb1", 8000); u != tc.url || p != tc.path {
				t.Fatalf("got %q %q, want %q %q", u, p, tc.url, tc.path)
			}
		})
	}
}

func TestGatewayConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{GatewayURL: "ftp://gw"}, {GatewayURL: "127.0.0.1:8480"}, {GatewayURL: "http://gw/?x=1"},
		{GatewayDomain: "Sbx.Localhost"}, {GatewayDomain: "-a.b"}, {GatewayDomain: "a..b"}, {GatewayDomain: "a.b."},
		{ReservedPorts: []int{0}}, {ReservedPorts: []int{65536}}, {PortLinkKey: []byte("short")},
	} {
		if _, err := c.withDefaults(); !errors.Is(err, ErrGatewayConfig) {
			t.Errorf("%+v: %v, want ErrGatewayConfig", c, err)
		}
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true}, {"22", []int{22}, true}, {" 22, 2375 ,", []int{22, 2375}, true},
		{"ssh", nil, false}, {"0", nil, false}, {"70000", nil, false}, {"22;23", nil, false},
	} {
		got, err := ParsePorts(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParsePorts(%q) = %v, %v", tc.in, got, err)
		}
	}
}
