package worker

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestStreamWriterReusesChunks: a long stream's chunks are stored whole and
// in order, and the writer reuses the buffers of stored chunks instead of
// allocating one a chunk: at most the publish window's and one more are
// made. (It cloned every chunk before: this process, the embedded server
// included, allocated 231 MiB for the 32 MiB stream, now 193 MiB.)
func TestStreamWriterReusesChunks(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := srv.Connect("t")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	const chunk, total, write, window = 128 << 10, 32 << 20, 16 << 10, 8
	subject := events.StreamSubjectsFor(events.TenantOpen, "sb", "p").Stdout
	w := newStreamWriter(js, subject, "sb-p-o", chunk, time.Second, window, total)
	p := make([]byte, write)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := 0; i < total/write; i++ {
		for j := range p {
			p[j] = byte(i + j)
		}
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	last, err := w.Close()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		t.Fatal(err)
	}
	if last != total/chunk {
		t.Fatalf("last sequence %d, want %d", last, total/chunk)
	}
	if w.made > window+2 {
		t.Errorf("%d chunk buffers made for %d chunks through a window of %d", w.made, last, window)
	}
	t.Logf("%d chunk buffers made for %d chunks; %d MiB allocated by the process", w.made, last, (ms1.TotalAlloc-ms0.TotalAlloc)>>20)
	st, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 0, total)
	for i := 0; i < total/write; i++ {
		for j := range p {
			p[j] = byte(i + j)
		}
		want = append(want, p...)
	}
	for seq := uint64(1); seq <= last; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(events.HeaderSeq); got != strconv.FormatUint(seq, 10) {
			t.Fatalf("message %d has Sbx-Seq %s", seq, got)
		}
		off := int(seq-1) * chunk
		if !bytes.Equal(m.Data, want[off:off+chunk]) {
			t.Fatalf("chunk %d differs from what was written", seq)
		}
	}
}
