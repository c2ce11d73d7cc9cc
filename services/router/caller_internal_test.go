package router

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestCallerUntilBounds: the caller's timeout header bounds a command only
// when it is a sane number of milliseconds; garbage, zero, negative and
// overflowing values leave the request unbounded instead of cutting it to
// a deadline in the past.
func TestCallerUntilBounds(t *testing.T) {
	for _, tc := range []struct {
		v       string
		bounded bool
	}{
		{"", false}, {"x", false}, {"0", false}, {"-5", false},
		{"9223372036854775807", false}, {"86400001", false},
		{"5000", true}, {"86400000", true},
	} {
		got := callerUntil(micro.Headers{events.HeaderCallerTimeout: []string{tc.v}})
		if got.IsZero() == tc.bounded {
			t.Errorf("%q: until %v, bounded %v", tc.v, got, tc.bounded)
		}
		if !got.IsZero() && !got.After(time.Now()) {
			t.Errorf("%q: until %v is not ahead", tc.v, got)
		}
	}
}
