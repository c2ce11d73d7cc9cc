package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"testing"
)

func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		c := tls.Client(b, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		_ = c.Handshake()
		_ = b.Close()
	}()
	buf := make([]byte, 4096)
	n, _ := a.Read(buf)
	return buf[:n]
}

func TestSniff(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want hello
	}{
		{"tls sni", clientHello(t, "api.example.com"), hello{name: "api.example.com"}},
		{"tls without sni", clientHello(t, ""), hello{}},
		{"http host", []byte("GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n"), hello{name: "a.test", http: true}},
		{"http absolute uri", []byte("GET http://b.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n"), hello{name: "b.test", http: true}},
		{"connect", []byte("CONNECT c.test:443 HTTP/1.1\r\nHost: c.test:443\r\n\r\n"), hello{name: "c.test", port: 443, connect: true, http: true}},
		{"connect without port", []byte("CONNECT c.test HTTP/1.1\r\n\r\n"), hello{connect: true, http: true}},
		{"ssh banner", []byte("SSH-2.0-OpenSSH\r\n"), hello{}},
		{"empty", nil, hello{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sniff(bufio.NewReader(bytes.NewReader(c.in))); got != c.want {
				t.Fatalf("sniff = %+v, want %+v", got, c.want)
			}
		})
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("CONNECT a.test:443 HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		h := sniff(bufio.NewReader(bytes.NewReader(in)))
		if h.port != 0 && !h.connect {
			t.Fatalf("port from a hello that is not a CONNECT: %+v", h)
		}
	})
}
