package cli

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestDevOutputMaxBytes: SBX_OUTPUT_MAX_BYTES sizes SBX_OUT (the workers'
// output ledgers read their budget from it), so that an operator with many
// live sandboxes can give each a larger share.
func TestDevOutputMaxBytes(t *testing.T) {
	t.Setenv("SBX_OUTPUT_MAX_BYTES", "64MiB")
	d := startDev(t, "--backends", "fake")
	d.waitLive(t, "fake", "")
	nc, err := nats.Connect(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 64<<20 {
		t.Fatalf("SBX_OUT MaxBytes %d, want %d", got, 64<<20)
	}
}

func TestOutputMaxBytesParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"64MiB", 64 << 20, true}, {"1GiB", 1 << 30, true}, {"1048576", 1 << 20, true},
		{"lots", 0, false}, {"-1", 0, false}, {"0", 0, false},
	} {
		got, err := outputMaxBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("outputMaxBytes(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
