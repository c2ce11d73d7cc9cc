package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Dialer opens a new connection to the server under test, named name.
type Dialer func(ctx context.Context, name string) (*nats.Conn, error)

// Scenarios are the scenario names Run accepts.
var Scenarios = []string{"exec", "create", "stream", "live", "resume"}

// Hard bounds of any run, whatever the flags say.
const (
	MaxCount      = 1_000_000
	MaxDuration   = 10 * time.Minute
	MaxPause      = time.Minute
	MaxClients    = 4096
	MaxConns      = 256
	MaxLive       = 100_000
	MaxStreamSize = 16 << 30
)

// Config is one bench run.
type Config struct {
	Dial Dialer
	// Class is the sandbox class of exec, stream and live (default fake);
	// Classes are create's (default: Class).
	Class   string
	Classes []string
	// Count bounds each series' operations; Duration bounds its time.
	// Defaults 2000 and 10 s (create: 50 per class).
	Count    int
	Duration time.Duration
	// Warmup operations before exec's series; default 100.
	Warmup int
	// Clients concurrent callers over Conns connections for throughput;
	// defaults 64 and 4.
	Clients, Conns int
	// Cmd is the command exec and live run; default: echo hi on fake,
	// true elsewhere.
	Cmd []string
	// StreamBytes per streamed exec (default 64 MiB), StreamChunk the size
	// of each write (default 64 KiB).
	StreamBytes int64
	StreamChunk int
	// StreamWriter is what writes the stream in a sandbox of a real class
	// (the fake one has its own): "dd" (default), StreamChunk bytes a
	// write, or "head", head -c with its own writes (busybox's: 4 KiB, at
	// a cost that makes it, not the path, the limit).
	StreamWriter string
	// Live are the populations of the live scenario, ascending (default
	// 10, 100, 1000); LiveSamples the operations of each kind measured at
	// each (default 100); Parallel the creates in flight while filling
	// (default 16).
	Live        []int
	LiveSamples int
	Parallel    int
	// Pause is think time (default none, at most MaxPause): create's after
	// each kill (a warm pool's refill, a container start, otherwise runs
	// under the next create), and exec's before each sequential exec (an
	// agent's loop, whose host and processes have gone idle meanwhile).
	Pause time.Duration
	// SandboxTimeout is the lifetime of the sandboxes bench creates
	// (seconds; default 600). Bench kills them when it ends.
	SandboxTimeout int
	// Progress receives a progress line while a series runs (nil: none).
	Progress io.Writer
	// RSS names local processes (name -> pid) whose resident sets are
	// reported at each live population: sandboxio dev, or a split
	// deployment's router and worker.
	RSS map[string]int
}

func (c Config) withDefaults(scenario string) (Config, error) {
	if c.Dial == nil {
		return c, errors.New("bench: Dial is required")
	}
	if c.Class == "" {
		c.Class = "fake"
	}
	if len(c.Classes) == 0 {
		c.Classes = []string{c.Class}
	}
	if c.Count <= 0 {
		c.Count = 2000
		if scenario == "create" {
			c.Count = 50
		}
		if scenario == "stream" {
			c.Count = 5
		}
		if scenario == "resume" {
			c.Count = 5
		}
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Warmup <= 0 {
		c.Warmup = 100
	}
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.Conns <= 0 {
		c.Conns = 4
	}
	c.Conns = min(c.Conns, c.Clients)
	if c.StreamBytes <= 0 {
		c.StreamBytes = 64 << 20
	}
	if c.StreamWriter == "" {
		c.StreamWriter = "dd"
	}
	if c.StreamChunk <= 0 {
		c.StreamChunk = 64 << 10
	}
	if len(c.Live) == 0 {
		c.Live = []int{10, 100, 1000}
	}
	if c.LiveSamples <= 0 {
		c.LiveSamples = 100
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.SandboxTimeout <= 0 {
		c.SandboxTimeout = 600
	}
	switch {
	case c.Count > MaxCount:
		return c, fmt.Errorf("bench: count %d is over the limit of %d", c.Count, MaxCount)
	case c.Duration > MaxDuration:
		return c, fmt.Errorf("bench: duration %s is over the limit of %s", c.Duration, MaxDuration)
	case c.Clients > MaxClients || c.Conns > MaxConns:
		return c, fmt.Errorf("bench: at most %d clients over %d connections", MaxClients, MaxConns)
	case c.Pause < 0 || c.Pause > MaxPause:
		return c, fmt.Errorf("bench: pause %s is not within 0 to %s", c.Pause, MaxPause)
	case c.StreamBytes > MaxStreamSize:
		return c, fmt.Errorf("bench: stream size over the limit of %d bytes", int64(MaxStreamSize))
	case c.StreamWriter != "dd" && c.StreamWriter != "head":
		return c, fmt.Errorf("bench: stream writer %q: dd or head", c.StreamWriter)
	case c.StreamWriter == "dd" && c.StreamBytes%int64(c.StreamChunk) != 0:
		return c, fmt.Errorf("bench: the dd writer needs a stream size that is a multiple of the chunk (%d bytes)", c.StreamChunk)
	}
	prev := 0
	for _, n := range c.Live {
		if n <= prev || n > MaxLive {
			return c, fmt.Errorf("bench: live populations must ascend, each at most %d: %v", MaxLive, c.Live)
		}
		prev = n
	}
	return c, nil
}

// Report is the outcome of one run.
type Report struct {
	Scenario string    `json:"scenario"`
	Started  time.Time `json:"started"`
	Server   string    `json:"server"` // the server's name and version
	// LoadAvg is this machine's /proc/loadavg when the run started (the
	// figures of a busy machine are noisy; the ratios less so).
	LoadAvg  string    `json:"loadavg,omitempty"`
	Measures []Measure `json:"measures"`
	// Notes say what the run could not measure as asked.
	Notes []string `json:"notes,omitempty"`
}

// Run runs one scenario.
func Run(ctx context.Context, scenario string, cfg Config) (*Report, error) {
	if !slices.Contains(Scenarios, scenario) {
		return nil, fmt.Errorf("bench: unknown scenario %q (one of %s)", scenario, strings.Join(Scenarios, ", "))
	}
	cfg, err := cfg.withDefaults(scenario)
	if err != nil {
		return nil, err
	}
	r := &Report{Scenario: scenario, Started: time.Now().UTC(), LoadAvg: loadAvg()}
	b, err := newBench(ctx, cfg, r)
	if err != nil {
		return nil, err
	}
	defer b.close()
	switch scenario {
	case "exec":
		err = b.execScenario(ctx)
	case "create":
		err = b.createScenario(ctx)
	case "stream":
		err = b.streamScenario(ctx)
	case "live":
		err = b.liveScenario(ctx)
	case "resume":
		err = b.resumeScenario(ctx) // resume.go
	}
	return r, err
}

// CheckTarget refuses a server URL list that names any host other than a
// loopback address or localhost, unless yes: a benchmark is a load test,
// and nobody should run one against a shared deployment by mistake.
func CheckTarget(urls string, yes bool) error {
	if yes {
		return nil
	}
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("bench: server URL %q: %w", redact(u), err)
		}
		if !loopbackHost(p.Hostname()) {
			return fmt.Errorf("bench: %s is not a loopback address: a benchmark loads the server it measures; pass --yes to run it anyway", p.Hostname())
		}
	}
	return nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// redact drops a URL's user info.
func redact(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		p.User = nil
		return p.String()
	}
	return u
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
