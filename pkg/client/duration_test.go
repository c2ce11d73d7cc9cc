package client_test

import (
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90", 90 * time.Second, true}, {"90s", 90 * time.Second, true}, {"5m", 5 * time.Minute, true},
		{"1.5", 1500 * time.Millisecond, true}, {" 2h ", 2 * time.Hour, true}, {"0", 0, true},
		{"", 0, false}, {"-1", 0, false}, {"-5s", 0, false}, {"soon", 0, false}, {"5 m", 0, false}, {"1e300", 0, false},
	} {
		got, err := client.ParseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
