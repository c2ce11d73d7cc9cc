//go:build integration

package dockerworker

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// The benchmarks in this file measure the whole path (Go client -> router
// -> JetStream -> worker -> Docker) against the same work done directly on
// the Engine API in the same run, alternating the two so that a noisy
// machine slows both alike. Run them with `make bench`.

const pathRouting = `default_class: standard
classes:
  standard: {backend: docker, image: "sandboxio/base:latest", require_isolation: container}
`

func pathEnv(b *testing.B, cfg Config) (*sbxtest.Env, *Backend, *client.Client) {
	be := newTestBackend(b, cfg)
	env := sbxtest.Start(b, sbxtest.Options{Backend: be, Routing: pathRouting})
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return env, be, cli
}

func p50(samples []time.Duration) float64 {
	slices.Sort(samples)
	return float64(samples[len(samples)/2].Microseconds()) / 1000
}

func directExec(ctx context.Context, cli *client.Client, cid string, cmd []string, out io.Writer) error {
	ec, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	hj, err := cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer hj.Close()
	if _, err := stdcopy.StdCopy(out, io.Discard, hj.Reader); err != nil {
		return err
	}
	ins, err := cli.ContainerExecInspect(ctx, ec.ID)
	if err != nil || ins.ExitCode != 0 {
		return fmt.Errorf("exit %d: %v", ins.ExitCode, err)
	}
	return nil
}

// BenchmarkPathExec: `true` through `sandboxio exec`'s path vs the Engine API.
func BenchmarkPathExec(b *testing.B) {
	env, be, cli := pathEnv(b, Config{})
	ctx := context.Background()
	sb := env.Create(ctx)
	cid := be.lookupCached(sb.SandboxID).containerID
	direct := make([]time.Duration, 0, b.N)
	path := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := directExec(ctx, cli, cid, []string{"true"}, io.Discard); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))
		start = time.Now()
		if res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		path = append(path, time.Since(start))
	}
	b.StopTimer()
	d, p := p50(direct), p50(path)
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(p, "path-p50-ms")
	b.ReportMetric(p/d, "path/direct")
}

// BenchmarkPathStream: 64 MiB of `yes` output read by a Go client from
// SBX_OUT vs read from the exec's attach stream directly.
func BenchmarkPathStream(b *testing.B) {
	env, be, cli := pathEnv(b, Config{})
	ctx := context.Background()
	sb := env.Create(ctx)
	cid := be.lookupCached(sb.SandboxID).containerID
	const size = 64 << 20
	cmd := []string{"sh", "-c", "yes abcdefghijklmnopqrstuvwxy | head -c " + strconv.Itoa(size)}
	var direct, path time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		var cw countWriter
		if err := directExec(ctx, cli, cid, cmd, &cw); err != nil || cw != size {
			b.Fatal(cw, err)
		}
		direct += time.Since(start)
		start = time.Now()
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: cmd})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for c, err := range p.Chunks() {
			if err != nil || c.Missing != 0 {
				b.Fatal(c.Missing, err)
			}
			n += int64(len(c.Data))
		}
		if res, err := p.Wait(); err != nil || res.ExitCode != 0 || n != size {
			b.Fatal(n, res, err)
		}
		path += time.Since(start)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(direct), "direct-MB/s")
	b.ReportMetric(mbps(path), "path-MB/s")
	b.ReportMetric(mbps(path)/mbps(direct), "path/direct")
}

// BenchmarkPathCreate: create to first exec through the whole path, cold
// and from the warm pool. The kill is not timed.
func BenchmarkPathCreate(b *testing.B) {
	for _, mode := range []string{"cold", "warm"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{}
			if mode == "warm" {
				cfg.Pools = []PoolConfig{{Class: "standard", Image: baseImage, Size: 2}}
			}
			env, be, _ := pathEnv(b, cfg)
			ctx := context.Background()
			samples := make([]time.Duration, 0, b.N)
			creates := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if mode == "warm" {
					eventually(b, 60*time.Second, "a warm pool member", func() bool { return be.PoolIdle()["standard"] > 0 })
				}
				b.StartTimer()
				start := time.Now()
				sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
				if err != nil {
					b.Fatal(err)
				}
				creates = append(creates, time.Since(start))
				if res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
					b.Fatal(res, err)
				}
				samples = append(samples, time.Since(start))
				b.StopTimer()
				if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(p50(creates), "create-p50-ms")
			b.ReportMetric(p50(samples), "create-to-exec-p50-ms")
		})
	}
}

// BenchmarkLive200 keeps 200 sandboxes alive on one worker and reports the
// create latency at that load and the process's memory (embedded server,
// router, worker and client together). Every sandbox must have its agent,
// answering an exec through the whole path while all 200 live (issue 10);
// their agents' summed RSS is reported. One iteration is the whole scenario.
func BenchmarkLive200(b *testing.B) {
	const live = 200
	env, be, _ := pathEnv(b, Config{MaxConcurrentCreates: 8})
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		var mu sync.Mutex
		var ids []string
		var tail []time.Duration
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for j := 0; j < live; j++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				start := time.Now()
				sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
				if err != nil {
					b.Error(err)
					return
				}
				d := time.Since(start)
				mu.Lock()
				ids = append(ids, sb.SandboxID)
				if len(ids) > live-40 {
					tail = append(tail, d)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(ids) != live {
			b.Fatalf("%d of %d sandboxes created", len(ids), live)
		}
		// A create and an exec with 200 sandboxes live.
		start := time.Now()
		sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, sb.SandboxID)
		one := time.Since(start)
		start = time.Now()
		if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		execAtLoad := time.Since(start)
		// Every one of them through its agent, with all of them live.
		var execs []time.Duration
		var agentKiB float64
		for _, id := range ids {
			sb := be.lookupCached(id)
			cl := sb.agentOf()
			if cl == nil {
				b.Fatalf("sandbox %s of %d live has no agent", id, len(ids))
			}
			start := time.Now()
			if res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec in sandbox %s of %d live: %v %v", id, len(ids), res, err)
			}
			execs = append(execs, time.Since(start))
			agentKiB += agentRSSKiB(b, be, sb)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(p50(tail), "create-p50-ms-last40")
		b.ReportMetric(float64(one.Microseconds())/1000, "create-at-200-ms")
		b.ReportMetric(float64(execAtLoad.Microseconds())/1000, "exec-at-200-ms")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(rssMiB(), "rss-MiB")
		b.ReportMetric(p50(execs), "exec-each-p50-ms")
		b.ReportMetric(agentKiB/1024/float64(len(ids)), "agent-rss-MiB-mean")
		for _, id := range ids {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if _, err := env.Client.Kill(ctx, id); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
}

// agentRSSKiB reads a sandbox's agent's resident set from the host's /proc
// (its pid in the host's namespace is the container's main process's).
func agentRSSKiB(b *testing.B, be *Backend, sb *sandbox) float64 {
	ins, err := be.cli.ContainerInspect(context.Background(), sb.containerID)
	if err != nil || ins.State == nil {
		b.Fatal(err)
	}
	// The agent is the container's PID 1 (ADR 29).
	for _, c := range []string{strconv.Itoa(ins.State.Pid)} {
		data, err := os.ReadFile("/proc/" + c + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb
			}
		}
	}
	b.Fatalf("no agent process under the container's init (pid %d)", ins.State.Pid)
	return 0
}

func rssMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
