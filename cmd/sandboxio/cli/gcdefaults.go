package cli

import (
	"runtime/debug"
)

// dev's garbage collector defaults. dev holds nats-server, the router, the
// workers, the auditor and the reaper in one heap that allocates ≈ 60 KB per
// exec and keeps little of it: at Go's default GOGC=100 the collector took
// ≈ 25 % of dev's CPU under `bench exec -c 64` (mark workers, assists and
// sweeping; docs/benchmarks.md). A larger GOGC collects a fifth as often;
// the soft memory limit keeps a large live heap (10,000 live sandboxes: a
// few hundred MiB) from growing five-fold before the collector steps in.
// GOGC and GOMEMLIMIT in the environment win, as for any Go program.
const (
	devGCPercent   = 400
	devMemoryLimit = 1 << 30
)

// applyDevGCDefaults sets dev's GC percent and memory limit unless the
// environment chose them; it returns what it set (0 for left alone).
func applyDevGCDefaults(getenv func(string) string) (gcPercent int, memLimit int64) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(devGCPercent)
		gcPercent = devGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(devMemoryLimit)
		memLimit = devMemoryLimit
	}
	return gcPercent, memLimit
}
