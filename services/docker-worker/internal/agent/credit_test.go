package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/agent/server"
)

// windowCounter is the worker's end of the channel, counting the window
// frames the client writes.
type windowCounter struct {
	net.Conn
	pw      *io.PipeWriter
	windows atomic.Int64
}

func (w *windowCounter) Write(p []byte) (int, error) {
	_, _ = w.pw.Write(p) // a copy for the counting reader
	return w.Conn.Write(p)
}

// TestOutputCreditIsBatched: streamed output is credited back to the agent
// in increments of a quarter window, not one window frame per data frame
// (each is a round through the daemon's attach copy); and the output is
// whole.
func TestOutputCreditIsBatched(t *testing.T) {
	a, b := net.Pipe()
	s, err := server.New(server.Config{Env: os.Environ(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, b, b, true) }()
	pr, pw := io.Pipe()
	wc := &windowCounter{Conn: a, pw: pw}
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		defer io.Copy(io.Discard, pr) // never block the client's writes
		br := bufio.NewReader(pr)
		if proto.SkipToSync(br, 1<<20) != nil {
			return
		}
		fr := proto.NewReader(br)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if f.Type == proto.TWindow {
				wc.windows.Add(1)
			}
		}
	}()
	c, err := Dial(context.Background(), wc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		b.Close()
		<-done
		pw.Close()
		<-counted
	})

	const size = 16 << 20
	var n countingWriter
	ex, err := c.Exec(ctx, ExecRequest{Argv: []string{"head", "-c", "16777216", "/dev/zero"}, Stdout: &n})
	if err != nil || ex.Code != 0 || n != size {
		t.Fatalf("exit %+v err %v: %d bytes of %d", ex, err, n, size)
	}
	got, most := wc.windows.Load(), int64(size/creditBatch)
	t.Logf("%d window frames for %d MiB", got, size>>20)
	if got > most {
		t.Errorf("%d window frames for %d MiB of output; want at most %d (one per %d KiB)", got, size>>20, most, creditBatch>>10)
	}
}
