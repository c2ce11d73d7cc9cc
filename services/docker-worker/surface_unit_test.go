package dockerworker

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestAdvertisesSetTimeout: the worker runtime moves a Docker sandbox's
// deadline, so the backend says it can; a create with
// requires:["set_timeout"] is then placed on Docker instead of refused
// with SBX_E1105 (issue 11).
func TestAdvertisesSetTimeout(t *testing.T) {
	if caps := (&Backend{}).Info().Capabilities; !caps.Has(events.CapSetTimeout) {
		t.Fatalf("docker advertises %v, without set_timeout", caps)
	}
}

func TestStartExitCode(t *testing.T) {
	for _, tc := range []struct {
		code int
		msg  string
		want int
	}{
		{126, `OCI runtime exec failed: exec failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown`, 127},
		{126, `OCI runtime exec failed: exec failed: unable to start container process: exec: "/work/x": stat /work/x: no such file or directory: unknown`, 127},
		{126, `OCI runtime exec failed: exec failed: unable to start container process: exec: "/etc/hostname": permission denied: unknown`, 126},
		{127, `sh: nosuch: not found`, 127},
	} {
		if got := startExitCode(tc.code, tc.msg); got != tc.want {
			t.Errorf("startExitCode(%d, %q) = %d, want %d", tc.code, tc.msg, got, tc.want)
		}
	}
}
