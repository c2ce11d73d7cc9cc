// Package wsecho is a minimal WebSocket (RFC 6455) echo server and client,
// for tests, benchmarks and the browser check of the ports gateway: text
// and binary messages of one frame each, unfragmented, at most MaxMessage
// bytes; a close is answered and ends the connection. It is not a general
// WebSocket library.
package wsecho

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// MaxMessage bounds a message either way.
const MaxMessage = 1 << 20

const guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// Opcodes.
const (
	OpText   = 1
	OpBinary = 2
	OpClose  = 8
	OpPing   = 9
	OpPong   = 10
)

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + guid))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Handler answers a WebSocket upgrade and echoes every message back.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Sec-WebSocket-Key")
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
			http.Error(w, "websocket upgrade expected", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			acceptKey(key) + "\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		conn := &Conn{c: c, br: brw.Reader, client: false}
		for {
			op, msg, err := conn.Read()
			if err != nil {
				return
			}
			switch op {
			case OpClose:
				_ = conn.write(OpClose, msg)
				return
			case OpPing:
				op = OpPong
			}
			if conn.write(op, msg) != nil {
				return
			}
		}
	})
}

// Conn is one WebSocket connection's framing.
type Conn struct {
	c      net.Conn
	br     *bufio.Reader
	client bool // a client masks what it sends
}

// Dial opens a WebSocket on c (already connected to the server) for path
// at host, with extra header lines, and checks the server's answer.
func Dial(c net.Conn, host, path string, header http.Header) (*Conn, error) {
	var kb [16]byte
	_, _ = rand.Read(kb[:])
	key := base64.StdEncoding.EncodeToString(kb[:])
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n", path, host, key)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("wsecho: upgrade answered %s", resp.Status)
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		return nil, errors.New("wsecho: wrong Sec-WebSocket-Accept")
	}
	return &Conn{c: c, br: br, client: true}, nil
}

// Write sends one text message.
func (c *Conn) Write(msg []byte) error { return c.write(OpText, msg) }

func (c *Conn) write(op byte, msg []byte) error {
	if len(msg) > MaxMessage {
		return errors.New("wsecho: message too large")
	}
	hdr := make([]byte, 0, 14+len(msg))
	hdr = append(hdr, 0x80|op)
	mask := byte(0)
	if c.client {
		mask = 0x80
	}
	switch n := len(msg); {
	case n < 126:
		hdr = append(hdr, mask|byte(n))
	case n < 1<<16:
		hdr = append(hdr, mask|126)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	default:
		hdr = append(hdr, mask|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	if c.client {
		var mk [4]byte
		_, _ = rand.Read(mk[:])
		hdr = append(hdr, mk[:]...)
		for i, x := range msg {
			hdr = append(hdr, x^mk[i%4])
		}
	} else {
		hdr = append(hdr, msg...)
	}
	_, err := c.c.Write(hdr)
	return err
}

// Read returns the next message and its opcode.
func (c *Conn) Read() (op byte, msg []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x80 == 0 {
		return 0, nil, errors.New("wsecho: fragmented messages are not supported")
	}
	op = h[0] & 0x0f
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > MaxMessage {
		return 0, nil, errors.New("wsecho: message too large")
	}
	var mk [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(c.br, mk[:]); err != nil {
			return 0, nil, err
		}
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(c.br, msg); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range msg {
			msg[i] ^= mk[i%4]
		}
	}
	return op, msg, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }
