package events

import "testing"

func TestResourcesWithin(t *testing.T) {
	limit := Resources{}.OrDefaults(DefaultMaxResources)
	if limit != DefaultMaxResources {
		t.Fatalf("OrDefaults of zero = %+v", limit)
	}
	if got := (Resources{CPUs: 2}).OrDefaults(DefaultMaxResources); got.CPUs != 2 || got.PIDs != DefaultMaxResources.PIDs {
		t.Fatalf("OrDefaults kept %+v", got)
	}
	tests := []struct {
		name  string
		r     Resources
		field string // "" = within
	}{
		{"zero", Resources{}, ""},
		{"at the limit", limit, ""},
		{"cpus", Resources{CPUs: limit.CPUs + 1}, "resources.cpus"},
		{"16 GiB memory", Resources{MemoryMB: 16 << 10}, "resources.memory_mb"},
		{"100000 pids", Resources{PIDs: 100000}, "resources.pids"},
		{"disk", Resources{DiskMB: limit.DiskMB + 1}, "resources.disk_mb"},
		{"negative", Resources{PIDs: -1}, "resources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.r.Within(limit)
			if tt.field == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Code != CodeInvalidValue || e.Details["field"] != tt.field {
				t.Fatalf("want SBX_E1007 on %s, got %v", tt.field, e)
			}
		})
	}
}
