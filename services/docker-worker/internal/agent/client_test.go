package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// realPair is pairIn in a directory of the test's own.
func realPair(t testing.TB) *Client { return pairIn(t, t.TempDir()) }

func TestExecThroughAgent(t *testing.T) {
	c := realPair(t)
	ctx := context.Background()
	var out, errb bytes.Buffer
	ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: strings.NewReader("in\x00put"),
		Stdout: &out, Stderr: &errb})
	if err != nil || ex.Code != 3 || out.String() != "in\x00put" || errb.String() != "err\n" {
		t.Fatalf("exit %+v err %v out %q stderr %q", ex, err, out.String(), errb.String())
	}
	ex, err = c.Exec(ctx, ExecRequest{Argv: []string{"no-such-binary-xyz"}})
	if err != nil || ex.StartError == "" || ex.Code != 127 {
		t.Fatalf("missing binary: %+v %v", ex, err)
	}
	// A big output through a slow reader keeps every byte, in order.
	var big bytes.Buffer
	ex, err = c.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x"}, Stdout: slowWriter{&big}})
	if err != nil || ex.Code != 0 || big.Len() != 5000000 {
		t.Fatalf("big output: %+v %v %d bytes", ex, err, big.Len())
	}
	// Cancel kills the whole tree, a daemonised child included.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	ex, err = c.Exec(cctx, ExecRequest{Argv: []string{"sh", "-c", "setsid sleep 60 & sleep 60"}, Mark: "p-cancel"})
	if !errors.Is(err, context.DeadlineExceeded) || ex.Signal != 9 || time.Since(start) > 3*time.Second {
		t.Fatalf("cancel: %+v %v after %s", ex, err, time.Since(start))
	}
}

type slowWriter struct{ w *bytes.Buffer }

func (s slowWriter) Write(p []byte) (int, error) {
	time.Sleep(50 * time.Microsecond)
	return s.w.Write(p)
}

func TestFilesThroughAgent(t *testing.T) {
	c := realPair(t)
	ctx := context.Background()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "tool")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	err := c.Write(ctx, link, 0o755, strings.NewReader("trojan"), 6)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Kind != proto.ErrSymlink {
		t.Fatalf("write through a symlink: %v, want a symlink error", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "original" {
		t.Fatalf("the symlink's target was written: %q", b)
	}
	p := filepath.Join(dir, "a/b/c.txt")
	if err := c.Write(ctx, p, 0o600, strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if n, err := c.Read(ctx, p, 0, &got); err != nil || n != 5 || got.String() != "hello" {
		t.Fatalf("read back: %d %v %q", n, err, got.String())
	}
	if _, err := c.Read(ctx, p, 3, &got); !errors.As(err, &pe) || pe.Kind != proto.ErrTooLarge {
		t.Fatalf("read over max: %v", err)
	}
	list, _, _, err := c.List(ctx, filepath.Join(dir, "a/b"))
	if err != nil || len(list) != 1 || list[0].Name != "c.txt" || list[0].Size != 5 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, p := range []string{"/proc/self/environ", "/sys/kernel", "/dev/null"} {
		if _, err := c.Read(ctx, p, 0, &got); !errors.As(err, &pe) || pe.Kind != proto.ErrForbidden {
			t.Errorf("read %s: %v, want forbidden", p, err)
		}
	}
	// A symlink into /proc is refused where it leads.
	if err := os.Symlink("/proc/self", filepath.Join(dir, "p")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, filepath.Join(dir, "p/environ"), 0, &got); !errors.As(err, &pe) || pe.Kind != proto.ErrForbidden {
		t.Errorf("read through a link to /proc: %v, want forbidden", err)
	}
}

// fakeAgent answers the handshake and then runs script on the raw stream.
func fakeAgent(t *testing.T, script func(w net.Conn, fr *proto.Reader)) (*Client, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		br := bufio.NewReader(b)
		if proto.SkipToSync(br, 1<<20) != nil {
			return
		}
		fr := proto.NewReader(br)
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		h, _ := proto.DecodeHello(f.Payload)
		p, _ := json.Marshal(proto.Hello{Version: proto.Version, Nonce: h.Nonce})
		_, _ = b.Write(proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: p}))
		script(b, fr)
	}()
	c, err := Dial(context.Background(), a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return c, b
}

// A lying or flooding agent fails its client with ErrProtocol at once; a hung
// one with ErrUnavailable within about a second.
func TestMisbehavingAgent(t *testing.T) {
	tests := []struct {
		name  string
		reply func(stream uint32) []byte
		want  error
	}{
		{"skipped sequence", func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.TStdout, Stream: s, Seq: 5, Payload: []byte("x")})
		}, ErrProtocol},
		{"past the window", func(s uint32) []byte {
			var b []byte
			for i := 0; i <= proto.DefaultWindow/proto.MaxData; i++ {
				b = proto.AppendFrame(b, proto.Frame{Type: proto.TStdout, Stream: s, Seq: uint64(i + 1), Payload: make([]byte, proto.MaxData)})
			}
			return b
		}, ErrProtocol},
		{"oversized frame", func(s uint32) []byte {
			b := proto.AppendFrame(nil, proto.Frame{Type: proto.TStdout, Stream: s, Seq: 1})
			b[14] = 0x7f
			return b
		}, ErrProtocol},
		{"exit code out of range", func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.TResult, Stream: s, Payload: []byte(`{"exit":{"code":999}}`)})
		}, ErrProtocol},
		{"stream never opened", func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.TStdout, Stream: s + 100, Seq: 1, Payload: []byte("x")})
		}, ErrProtocol},
		{"another worker attached", func(s uint32) []byte {
			return proto.AppendFrame(nil, proto.Frame{Type: proto.THello, Payload: []byte(`{"version":1,"nonce":"someone-else"}`)})
		}, ErrUnavailable},
		{"hung", nil, ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stop := make(chan struct{})
			defer close(stop)
			c, _ := fakeAgent(t, func(w net.Conn, fr *proto.Reader) {
				f, err := fr.ReadFrame()
				if err != nil || tc.reply == nil {
					<-stop // hung: reads nothing more, answers nothing
					return
				}
				go func() { // keep reading, as a buffered stream would
					for {
						if _, err := fr.ReadFrame(); err != nil {
							return
						}
					}
				}()
				_, _ = w.Write(tc.reply(f.Stream))
			})
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// A consumer that does not keep up: the agent must wait for credit.
			stuck := writerFunc(func(p []byte) (int, error) { <-c.Done(); return len(p), nil })
			_, err := c.Exec(ctx, ExecRequest{Argv: []string{"true"}, Stdout: stuck})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 1600*time.Millisecond {
				t.Fatalf("noticed after %s", d)
			}
			<-c.Done()
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
