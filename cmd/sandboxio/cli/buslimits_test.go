package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestDevBusLimits (review #7): every stream's and bucket's byte limit is
// the operator's to set, SBX_BUS_<NAME>_MAX_BYTES for dev.
func TestDevBusLimits(t *testing.T) {
	want := map[string]int64{events.StreamOps: 48 << 20, events.StreamCommands: 24 << 20,
		"OBJ_" + events.BucketFiles: 40 << 20, "KV_" + events.BucketRegistry: 20 << 20}
	t.Setenv("SBX_BUS_OPS_MAX_BYTES", "48MiB")
	t.Setenv("SBX_BUS_COMMANDS_MAX_BYTES", "24MiB")
	t.Setenv("SBX_BUS_FILES_MAX_BYTES", "40MiB")
	t.Setenv("SBX_BUS_REGISTRY_MAX_BYTES", "20MiB")
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
	for name, w := range want {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != w {
			t.Errorf("%s MaxBytes %d, want %d", name, got, w)
		}
	}
}

// TestBusLimitFlags: the router and `bus init` take a flag per limit, its
// default from the environment, and refuse a bad size.
func TestBusLimitFlags(t *testing.T) {
	for _, path := range [][]string{{"router"}, {"bus", "init"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), "sandboxio", append(path, "--help"), &out, &errb)
		if code != 0 {
			t.Fatalf("%v --help: %d %s", path, code, errb.String())
		}
		for _, f := range []string{"--ops-max-bytes", "--commands-max-bytes", "--files-max-bytes", "--registry-max-bytes",
			"--workers-max-bytes", "--idempotency-max-bytes", "--tenants-max-bytes", "--audit-max-bytes", "--output-max-bytes",
			"SBX_BUS_OPS_MAX_BYTES"} {
			if !strings.Contains(out.String(), f) {
				t.Errorf("%v has no %s", path, f)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), "sandboxio", []string{"bus", "init", "--ops-max-bytes", "lots"}, &out, &errb); code != 2 {
		t.Errorf("bus init --ops-max-bytes lots: exit %d, want 2 (usage): %s", code, errb.String())
	}
}
