package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Measure is one measured series: latency percentiles, rate and errors.
type Measure struct {
	// Name says what was measured, e.g. "exec sequential" or "floor ping".
	Name string `json:"name"`
	// Floor is true for a floor series (no sandboxio code on the path).
	Floor bool `json:"floor,omitempty"`
	// Class is the sandbox class (create, stream, live), Population the
	// number of live sandboxes it was measured at (live).
	Class      string `json:"class,omitempty"`
	Population int    `json:"population,omitempty"`
	Clients    int    `json:"clients,omitempty"`

	Ops     int            `json:"ops"`
	Errors  map[string]int `json:"errors,omitempty"` // by SBX code, or timeout / no_responders / other
	Seconds float64        `json:"seconds"`
	Rate    float64        `json:"rate_per_s"`
	P50     float64        `json:"p50_ms"`
	P90     float64        `json:"p90_ms"`
	P99     float64        `json:"p99_ms"`
	Max     float64        `json:"max_ms"`
	MBps    float64        `json:"mb_per_s,omitempty"`

	// VsFloor names the floor series the ratios are to; RatioP50 is this
	// p50 over the floor's, RatioRate this rate over the floor's.
	VsFloor   string  `json:"vs_floor,omitempty"`
	RatioP50  float64 `json:"ratio_p50,omitempty"`
	RatioRate float64 `json:"ratio_rate,omitempty"`
	// RSSMiB are the resident sets of Config.RSS's processes after the
	// series, by name.
	RSSMiB map[string]float64 `json:"rss_mib,omitempty"`
	// CPUPerOp is the CPU time (user and system, µs) Config.RSS's
	// processes spent per operation of a throughput series, by name: a
	// cost that holds on a busy machine where rates do not.
	CPUPerOp map[string]float64 `json:"cpu_us_per_op,omitempty"`
}

// series collects one measure's samples; safe for concurrent use.
type series struct {
	mu      sync.Mutex
	name    string
	floor   bool
	lat     []time.Duration
	errs    map[string]int
	bytes   int64
	started time.Time
	elapsed time.Duration
}

func newSeries(name string, floor bool, capacity int) *series {
	return &series{name: name, floor: floor, lat: make([]time.Duration, 0, capacity), errs: map[string]int{}, started: time.Now()}
}

// add records one operation: its latency, or its error.
func (s *series) add(d time.Duration, err error) {
	s.mu.Lock()
	if err != nil {
		s.errs[ErrorCode(err)]++
	} else {
		s.lat = append(s.lat, d)
	}
	s.mu.Unlock()
}

func (s *series) addBytes(n int64) {
	s.mu.Lock()
	s.bytes += n
	s.mu.Unlock()
}

// done fixes the series' elapsed time (the wall time the rate is over).
func (s *series) done() { s.elapsed = time.Since(s.started) }

// measure summarises the series.
func (s *series) measure() Measure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.elapsed == 0 {
		s.elapsed = time.Since(s.started)
	}
	m := Measure{Name: s.name, Floor: s.floor, Ops: len(s.lat), Seconds: s.elapsed.Seconds()}
	for _, n := range s.errs {
		m.Ops += n
	}
	if len(s.errs) > 0 {
		m.Errors = make(map[string]int, len(s.errs))
		for k, v := range s.errs {
			m.Errors[k] = v
		}
	}
	lat := slices.Clone(s.lat)
	slices.Sort(lat)
	m.P50, m.P90, m.P99 = pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99)
	if len(lat) > 0 {
		m.Max = ms(lat[len(lat)-1])
	}
	if secs := s.elapsed.Seconds(); secs > 0 {
		m.Rate = float64(len(s.lat)) / secs
		if s.bytes > 0 {
			m.MBps = float64(s.bytes) / 1e6 / secs
		}
	}
	return m
}

// pct is the p-th quantile of sorted latencies, in milliseconds (nearest
// rank); 0 when there are none.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return ms(sorted[min(max(i, 0), len(sorted)-1)])
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// versus sets m's ratios to floor f.
func (m *Measure) versus(f Measure) {
	m.VsFloor = f.Name
	if f.P50 > 0 {
		m.RatioP50 = m.P50 / f.P50
	}
	if f.Rate > 0 && m.Clients > 0 {
		m.RatioRate = m.Rate / f.Rate
	}
}

// ErrorCode classifies a failed operation: its SBX code, or timeout,
// no_responders, cancelled or other.
func ErrorCode(err error) string {
	var e *events.Error
	switch {
	case errors.As(err, &e) && e.Code != "":
		return string(e.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "other"
}

// bounded reports whether another operation may start: fewer than count
// started and the deadline not passed.
type bounds struct {
	count    int
	deadline time.Time
}

func (b bounds) more(i int) bool { return i < b.count && time.Now().Before(b.deadline) }

// measureBusy is measure with the rates over the sum of the operations'
// own durations instead of the wall time (for series run alternately).
func (s *series) measureBusy() Measure {
	s.mu.Lock()
	var busy time.Duration
	for _, d := range s.lat {
		busy += d
	}
	s.elapsed = busy
	s.mu.Unlock()
	if busy == 0 {
		s.elapsed = time.Nanosecond
	}
	return s.measure()
}

// since pairs the time since t with err, for add(since(t, op())): op runs
// before the clock is read.
func since(t time.Time, err error) (time.Duration, error) { return time.Since(t), err }
