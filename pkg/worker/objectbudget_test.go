package worker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// TestObjectBudgetDefaults: one sandbox's files.read objects were bounded
// by 1 GiB, four times the per-sandbox storage quota and half of sbx_files
// (review #5). By default a sandbox's reads store no more than a
// sandbox may store through files.put, well within the bucket.
func TestObjectBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		what  string
		limit int64
	}{
		{"max_sandbox_storage_bytes", events.DefaultTenantLimits.MaxSandboxStorageBytes},
		{"max_storage_bytes", events.DefaultTenantLimits.MaxStorageBytes},
		{"a quarter of sbx_files", bus.DefaultMaxBytes.FilesMaxBytes / 4},
	} {
		if worker.DefaultMaxSandboxObjectBytes > tc.limit {
			t.Errorf("DefaultMaxSandboxObjectBytes %d > %s %d", worker.DefaultMaxSandboxObjectBytes, tc.what, tc.limit)
		}
	}
}
