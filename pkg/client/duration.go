package client

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration as people and models write them: a bare
// number is seconds ("90", "1.5"), anything else is Go's form ("90s",
// "5m", "1h30m"). Negative durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration (want e.g. 90, 90s or 5m)")
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs > float64(1<<63-1)/float64(time.Second) {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		d = time.Duration(secs * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("duration %q: want seconds (90) or a number with a unit (90s, 5m, 1h)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}
