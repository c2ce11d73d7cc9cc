package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func TestCheckTarget(t *testing.T) {
	for _, tc := range []struct {
		urls string
		yes  bool
		ok   bool
	}{
		{"nats://127.0.0.1:4222", false, true},
		{"nats://localhost:4222", false, true},
		{"nats://[::1]:4222", false, true},
		{"127.0.0.2:4222", false, true},
		{"tls://user:pw@127.0.0.1:4222", false, true},
		{"nats://10.0.0.5:4222", false, false},
		{"nats://127.0.0.1:4222,nats://nats.example:4222", false, false},
		{"nats://localhost.example:4222", false, false},
		{"nats://10.0.0.5:4222", true, true},
	} {
		if err := CheckTarget(tc.urls, tc.yes); (err == nil) != tc.ok {
			t.Errorf("CheckTarget(%q, %v) = %v, want ok %v", tc.urls, tc.yes, err, tc.ok)
		}
	}
}

func TestSeriesPercentiles(t *testing.T) {
	s := newSeries("x", false, 100)
	for i := 1; i <= 100; i++ {
		s.add(time.Duration(i)*time.Millisecond, nil)
	}
	s.add(0, events.Errorf(events.CodeOverloaded, "full"))
	s.add(0, fmt.Errorf("wrapped: %w", context.DeadlineExceeded))
	s.add(0, nats.ErrNoResponders)
	s.add(0, errors.New("?"))
	m := s.measure()
	if m.P50 != 50 || m.P90 != 90 || m.P99 != 99 || m.Max != 100 || m.Ops != 104 {
		t.Fatalf("percentiles: %+v", m)
	}
	want := map[string]int{string(events.CodeOverloaded): 1, "timeout": 1, "no_responders": 1, "other": 1}
	if fmt.Sprint(m.Errors) != fmt.Sprint(want) {
		t.Fatalf("errors %v, want %v", m.Errors, want)
	}
	f := Measure{Name: "floor", P50: 25}
	m.versus(f)
	if m.RatioP50 != 2 || m.VsFloor != "floor" {
		t.Fatalf("ratio: %+v", m)
	}
	if e := newSeries("empty", false, 0).measure(); e.P50 != 0 || e.Max != 0 {
		t.Fatalf("empty series: %+v", e)
	}
}

func TestConfigBounds(t *testing.T) {
	dial := func(context.Context, string) (*nats.Conn, error) { return nil, errors.New("no") }
	for _, c := range []Config{
		{Dial: dial, Count: MaxCount + 1},
		{Dial: dial, Duration: MaxDuration + time.Second},
		{Dial: dial, Clients: MaxClients + 1},
		{Dial: dial, Live: []int{10, 10}},
		{Dial: dial, Live: []int{MaxLive + 1}},
		{Dial: dial, Pause: -time.Second},
		{Dial: dial, Pause: MaxPause + time.Second},
		{Dial: dial, StreamWriter: "cat"},
		{Dial: dial, StreamBytes: 100, StreamChunk: 64},
		{},
	} {
		if _, err := c.withDefaults("exec"); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := Run(context.Background(), "nope", Config{Dial: dial}); err == nil {
		t.Error("an unknown scenario ran")
	}
}

// TestStreamCmd: the stream's writer in a sandbox writes --chunk bytes at a
// time unless head is asked for.
func TestStreamCmd(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Class: "fake", StreamBytes: 1 << 20, StreamChunk: 4096, StreamWriter: "dd"}, "write 1048576 4096"},
		{Config{Class: "base", StreamBytes: 1 << 20, StreamChunk: 65536, StreamWriter: "dd"}, "dd if=/dev/zero bs=65536 count=16 status=none"},
		{Config{Class: "base", StreamBytes: 1 << 20, StreamChunk: 65536, StreamWriter: "head"}, "head -c 1048576 /dev/zero"},
	} {
		if got := strings.Join(streamCmd(tc.cfg), " "); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.cfg, got, tc.want)
		}
	}
	c, err := (&Config{Dial: func(context.Context, string) (*nats.Conn, error) { return nil, nil }}).withDefaults("stream")
	if err != nil || c.StreamWriter != "dd" || c.StreamBytes%int64(c.StreamChunk) != 0 {
		t.Fatalf("defaults %+v %v", c, err)
	}
}
