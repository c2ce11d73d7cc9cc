package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// hello is what the first bytes of a connection say about where it goes.
type hello struct {
	name    string // TLS SNI, HTTP Host or CONNECT host; "" when none
	port    uint16 // the CONNECT port, else 0 (the original port)
	connect bool   // an HTTP CONNECT: answer 200 before relaying
	http    bool   // a plain HTTP request: a refusal can say 403
}

var errStopHandshake = errors.New("egress: client hello read")

// sniff reads a TLS ClientHello or an HTTP request head from br. Neither is
// an error: a connection that starts otherwise has no name.
func sniff(br *bufio.Reader) hello {
	first, err := br.Peek(1)
	if err != nil {
		return hello{}
	}
	if first[0] == 0x16 { // TLS handshake record
		var name string
		cfg := &tls.Config{GetConfigForClient: func(ch *tls.ClientHelloInfo) (*tls.Config, error) {
			name = ch.ServerName
			return nil, errStopHandshake
		}}
		_ = tls.Server(readOnlyConn{r: br}, cfg).Handshake()
		return hello{name: name}
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return hello{}
	}
	_ = req.Body.Close()
	h := hello{http: true}
	host, port, err := net.SplitHostPort(req.Host)
	if err != nil {
		host, port = req.Host, ""
	}
	h.name = host
	if req.Method == http.MethodConnect {
		h.connect = true
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return hello{http: true, connect: true}
		}
		h.port = uint16(p)
	}
	// A plain request goes to the port the sandbox connected to, whatever
	// port its Host names.
	return h
}

// readOnlyConn lets crypto/tls read a ClientHello without answering it.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (readOnlyConn) Write(p []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                       { return nil }
func (readOnlyConn) LocalAddr() net.Addr                { return nil }
func (readOnlyConn) RemoteAddr() net.Addr               { return nil }
func (readOnlyConn) SetDeadline(t time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(t time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(t time.Time) error { return nil }
