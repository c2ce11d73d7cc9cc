package wsecho

import (
	"bytes"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEcho(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := Dial(c, host, "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, MaxMessage} {
		msg := bytes.Repeat([]byte{'x'}, n)
		if err := ws.Write(msg); err != nil {
			t.Fatal(err)
		}
		op, got, err := ws.Read()
		if err != nil || op != OpText || !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: op %d, %d bytes, %v", n, op, len(got), err)
		}
	}
}
