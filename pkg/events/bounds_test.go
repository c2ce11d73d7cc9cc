package events

import (
	"math"
	"strconv"
	"testing"
)

// TestRequestBoundsRefusedAtDecode: every duration and size a request
// carries is bounded when it is validated, so that nothing downstream
// (time.Duration(ms)*time.Millisecond, a buffer of n bytes) can overflow.
// A timeout_ms of 9223372036854 once overflowed the router's bound to a
// negative duration: the caller got SBX_E1602 at once while its command ran.
func TestRequestBoundsRefusedAtDecode(t *testing.T) {
	big := strconv.FormatInt(math.MaxInt64/1_000_000, 10) // 9223372036854
	maxMS := strconv.FormatInt(MaxTimeoutMS, 10)
	tests := []struct {
		name, op, body string
		field          string // "" = accepted
	}{
		{"exec timeout_ms overflow", OpExec, `{"sandbox_id":"s","cmd":["true"],"timeout_ms":` + big + `}`, "timeout_ms"},
		{"exec timeout_ms past the longest lifetime", OpExec, `{"sandbox_id":"s","cmd":["true"],"timeout_ms":` + maxMS + `1}`, "timeout_ms"},
		{"exec timeout_ms at the bound", OpExec, `{"sandbox_id":"s","cmd":["true"],"timeout_ms":` + maxMS + `}`, ""},
		{"exec output_limit huge", OpExec, `{"sandbox_id":"s","cmd":["true"],"output_limit":9223372036854775807}`, "output_limit"},
		{"exec rows", OpExec, `{"sandbox_id":"s","cmd":["true"],"tty":true,"rows":100000}`, "rows"},
		{"exec cols negative", OpExec, `{"sandbox_id":"s","cmd":["true"],"tty":true,"cols":-1}`, "cols"},
		{"run_code timeout_ms overflow", OpRunCode, `{"sandbox_id":"s","code":"1","timeout_ms":` + big + `}`, "timeout_ms"},
		{"create disk_mb huge", OpCreate, `{"timeout_s":10,"resources":{"disk_mb":9223372036854775807}}`, "resources"},
		{"files.write mode", OpFilesWrite, `{"sandbox_id":"s","path":"/a","data":"","mode":4294967295}`, "mode"},
		{"files.write ref parts", OpFilesWrite, `{"sandbox_id":"s","path":"/a","ref":{"bucket":"sbx_files","name":"t/s/x","size":1,"parts":2147483647}}`, "ref.parts"},
		{"files.write ref size negative", OpFilesWrite, `{"sandbox_id":"s","path":"/a","ref":{"bucket":"sbx_files","name":"t/s/x","size":-1}}`, "ref.size"},
		{"files.get part", OpFilesGet, `{"sandbox_id":"s","name":"open/s/x","part":2147483647}`, "part"},
		{"files.put part", OpFilesPut, `{"sandbox_id":"s","name":"open/s/x","part":2147483647,"data":""}`, "part"},
		{"list limit", OpList, `{"limit":2147483647}`, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := NewRequest(tt.op)
			e := Decode([]byte(tt.body), r)
			if e == nil {
				e = r.Validate()
			}
			if tt.field == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted %s", tt.body)
			}
			// An output_limit above the maximum has its own code, which
			// names the limit (SBX_E1705).
			if e.Retryable || (e.Code.Number()/100 != 10 && e.Code != CodeOutputLimitTooLarge) {
				t.Fatalf("got %v, want a 10xx request code (or SBX_E1705), not retryable", e)
			}
			if e.Details["field"] != tt.field {
				t.Fatalf("details.field = %v, want %q (%v)", e.Details["field"], tt.field, e)
			}
		})
	}
}
