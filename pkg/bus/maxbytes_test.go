package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/bus"
)

// TestEveryStreamIsBounded: one tenant's files.put once filled the
// JetStream disk (sbx_files had no MaxBytes), and then every tenant's
// output and the audit records stopped. Every stream and bucket Ensure
// makes has a byte limit, the operator's when set, and the owner applies a
// new one to a bus that exists.
func TestEveryStreamIsBounded(t *testing.T) {
	_, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{Owner: true}); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]int64) {
		t.Helper()
		n := 0
		for info := range js.ListStreams(ctx).Info() {
			n++
			if info.Config.MaxBytes <= 0 {
				t.Errorf("stream %s has no byte limit", info.Config.Name)
			}
			if w, ok := want[info.Config.Name]; ok && info.Config.MaxBytes != w {
				t.Errorf("stream %s: MaxBytes %d, want %d", info.Config.Name, info.Config.MaxBytes, w)
			}
		}
		if n < 8 {
			t.Fatalf("%d streams, want the 3 streams, 4 buckets and the object store", n)
		}
	}
	check(nil)
	// The operator's limits, applied by the owner to the bus as it is.
	cfg := bus.Config{Owner: true, FilesMaxBytes: 64 << 20, RegistryMaxBytes: 32 << 20, OpsMaxBytes: 128 << 20, CommandsMaxBytes: 16 << 20}
	if err := bus.Ensure(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	check(map[string]int64{"OBJ_sbx_files": 64 << 20, "KV_sbx_registry": 32 << 20, "SBX_OPS": 128 << 20, "SBX_CMD": 16 << 20})
}
