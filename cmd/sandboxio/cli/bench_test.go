package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/bench"
)

// TestBenchScenarios runs every bench scenario briefly against `sandboxio
// dev` over TCP and checks that each printed its series beside the floor,
// with no errors, and left no sandbox behind.
func TestBenchScenarios(t *testing.T) {
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	short := []string{"--json", "--duration", "5s", "--timeout", "50s"}
	for _, tc := range []struct {
		scenario string
		args     []string
		want     []string // series names that must be there with ops
		cpu      []string // series that must report dev's CPU per operation
	}{
		{"exec", []string{"-n", "40", "--warmup", "5", "-c", "4", "--conns", "2"},
			[]string{"floor ping", "floor request/reply", "exec sequential", "floor request/reply concurrent", "exec concurrent"},
			[]string{"exec concurrent"}},
		{"create", []string{"-n", "3"}, []string{"floor ping", "create", "create to first exec", "kill"}, nil},
		{"stream", []string{"-n", "2", "--size", "1MiB", "--chunk", "16384"}, []string{"floor publish/subscribe", "stream"},
			[]string{"floor publish/subscribe", "stream"}},
		{"live", []string{"--live", "3,6", "--samples", "3", "--parallel", "4"}, []string{"floor ping", "exec", "list", "create", "kill"}, nil},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			// dev runs in this process: its CPU is this process's.
			args := append(append([]string{"bench", tc.scenario, "--rss-pid", "dev=" + strconv.Itoa(os.Getpid())}, short...), tc.args...)
			r := cli(t, dev.URL, args...)
			if r.code != 0 {
				t.Fatalf("bench %s: %+v", tc.scenario, r)
			}
			var rep bench.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("bench %s --json: %v\n%s", tc.scenario, err, r.stdout)
			}
			got := map[string]bool{}
			for _, m := range rep.Measures {
				if m.Ops == 0 || len(m.Errors) > 0 || m.P50 <= 0 || m.P50 > m.P99 || m.P99 > m.Max {
					t.Errorf("series %q: %+v", m.Name, m)
				}
				if !m.Floor && m.VsFloor == "" {
					t.Errorf("series %q has no ratio to a floor", m.Name)
				}
				got[m.Name] = true
			}
			for _, name := range tc.want {
				if !got[name] {
					t.Errorf("bench %s: no series %q in %s", tc.scenario, name, r.stdout)
				}
			}
			for _, m := range rep.Measures {
				if slices.Contains(tc.cpu, m.Name) {
					if _, ok := m.CPUPerOp["dev"]; !ok {
						t.Errorf("series %q reports no CPU per operation of dev: %+v", m.Name, m)
					}
				}
			}
		})
	}
	t.Run("nothing left", func(t *testing.T) {
		r := cli(t, dev.URL, "ls")
		// A header line, and no sandbox under it.
		if r.code != 0 || !strings.Contains(r.stdout, "SANDBOX") || strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
			t.Fatalf("sandboxes left after bench: %+v", r)
		}
	})
	t.Run("pause", func(t *testing.T) {
		// Think time is spent between operations and left out of their
		// figures: at least Count pauses, in a series named for them.
		for _, tc := range []struct {
			args   []string
			series string
			least  time.Duration // all the pauses
			p50    float64       // ms: under one pause
		}{
			{[]string{"exec", "-n", "8", "--warmup", "1", "-c", "1", "--pause", "100ms"}, "exec sequential, 100ms apart", 800 * time.Millisecond, 100},
			{[]string{"create", "-n", "3", "--pause", "300ms"}, "create to first exec", 900 * time.Millisecond, 300},
		} {
			start := time.Now()
			r := cli(t, dev.URL, append(append([]string{"bench"}, tc.args...), "--json", "--duration", "20s")...)
			took := time.Since(start)
			var rep bench.Report
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
				t.Fatalf("bench %v: %+v", tc.args, r)
			}
			i := slices.IndexFunc(rep.Measures, func(m bench.Measure) bool { return m.Name == tc.series })
			if i < 0 || rep.Measures[i].P50 >= tc.p50 {
				t.Errorf("bench %v: series %q missing or its p50 holds the pause: %s", tc.args, tc.series, r.stdout)
			}
			if took < tc.least {
				t.Errorf("bench %v took %s: the pauses (%s in all) were not made", tc.args, took, tc.least)
			}
		}
	})
	t.Run("text", func(t *testing.T) {
		r := cli(t, dev.URL, "bench", "exec", "-n", "10", "--warmup", "1", "-c", "2", "--quiet")
		if r.code != 0 || !strings.Contains(r.stdout, "exec sequential") || !strings.Contains(r.stdout, "× floor ping") {
			t.Fatalf("bench text: %+v", r)
		}
	})
}

// TestBenchRefusesRemoteServer: without --yes, bench never connects to a
// server off the loopback interface; bad bounds are refused before
// anything runs.
func TestBenchRefusesRemoteServer(t *testing.T) {
	for _, tc := range []struct {
		url  string
		args []string
		want string
	}{
		{"nats://203.0.113.7:4222", nil, "not a loopback address"},
		{"nats://127.0.0.1:1,nats://sandboxio.example:4222", nil, "not a loopback address"},
		{"nats://127.0.0.1:1", []string{"--live", "10,5"}, "ascend"},
		{"nats://127.0.0.1:1", []string{"--size", "lots"}, "--size"},
		{"nats://127.0.0.1:1", []string{"--count", "2000000"}, "over the limit"},
		{"nats://127.0.0.1:1", []string{"--rss-pid", "router=me"}, "--rss-pid"},
	} {
		r := cli(t, tc.url, append([]string{"bench", "exec"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("bench exec %v against %s: %+v, want an error with %q", tc.args, tc.url, r, tc.want)
		}
	}
}

// TestBenchWithTenantCreds: a tenant (dev --auth) may not PING the
// router's micro service; bench says so and measures beside the bare
// request/reply instead of hanging on the PING.
func TestBenchWithTenantCreds(t *testing.T) {
	dev := startDev(t, "--auth", "--backends", "fake")
	tenantA := filepath.Join(dev.DataDir, "auth", "creds", "tenants", "tenant-a.creds")
	dev.waitLive(t, "fake", "", "--creds", tenantA)
	r := cli(t, dev.URL, "--creds", tenantA, "bench", "exec", "--json", "-n", "20", "--warmup", "2", "-c", "2", "--conns", "1", "--timeout", "40s")
	if r.code != 0 {
		t.Fatalf("bench with tenant creds: %+v", r)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "PING") {
		t.Errorf("no note on the missing PING floor: %+v", rep.Notes)
	}
	for _, m := range rep.Measures {
		if m.Ops == 0 || len(m.Errors) > 0 || (!m.Floor && m.VsFloor != "floor request/reply" && m.VsFloor != "floor request/reply concurrent") {
			t.Errorf("series %+v", m)
		}
	}
}
