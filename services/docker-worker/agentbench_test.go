//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// The agent's benchmarks (issue 10's goals), each beside the direct Docker
// Engine exec measured in the same run:
//
//	go test -tags integration -run '^$' -bench 'Agent' -benchtime 200x ./services/docker-worker/

// BenchmarkAgentExec: `true` through the whole sandboxio path (client,
// router, JetStream, worker, agent) vs a direct Engine API exec; and through
// Backend.Exec alone (no bus). Each on both agent channels (ADR 24): the
// socket (path-p50-ms, backend-p50-ms: what a runc sandbox uses) and the
// attach stream (attach-*), one sandbox each in the same run. The kinds take
// turns in blocks of execBlock back-to-back samples, so a noisy machine
// slows all alike: a single agent exec right after each Docker exec would
// measure the host still busy with Docker's exec (its clean-up goes on after
// the exit is reported) and a worker gone idle during it. That case, an
// exec after idleGap of nothing (an agent loop's think time), is
// path-idle-p50-ms.
func BenchmarkAgentExec(b *testing.B) {
	const execBlock, idleGap = 25, 50 * time.Millisecond
	env, be, cli := pathEnv(b, Config{})
	ctx := context.Background()
	sb := env.Create(ctx)
	be.attachOnly.Store(true)
	sbA := env.Create(ctx)
	be.attachOnly.Store(false)
	cid := be.lookupCached(sb.SandboxID).containerID
	for id, sock := range map[string]bool{sb.SandboxID: true, sbA.SandboxID: false} {
		if s := be.lookupCached(id); s.agentOf() == nil || (s.sockName != "") != sock {
			b.Fatalf("sandbox %s: agent %v, socket %q, want socket %v", id, s.agentOf() != nil, s.sockName, sock)
		}
	}
	var direct, path, pathA, backend, backendA []time.Duration
	timed := func(samples *[]time.Duration, one func() error) {
		start := time.Now()
		if err := one(); err != nil {
			b.Fatal(err)
		}
		*samples = append(*samples, time.Since(start))
	}
	viaDocker := func() error { return directExec(ctx, cli, cid, []string{"true"}, io.Discard) }
	viaPath := func(id string) func() error {
		return func() error {
			res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		}
	}
	viaBackend := func(id string) func() error {
		return func() error {
			st, err := be.Exec(ctx, id, worker.Process{Cmd: []string{"true"}})
			if err == nil && st.Code != 0 {
				err = fmt.Errorf("exit %d", st.Code)
			}
			return err
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += execBlock {
		n := min(execBlock, b.N-i)
		for _, k := range []struct {
			samples *[]time.Duration
			one     func() error
		}{{&direct, viaDocker}, {&path, viaPath(sb.SandboxID)}, {&pathA, viaPath(sbA.SandboxID)},
			{&backend, viaBackend(sb.SandboxID)}, {&backendA, viaBackend(sbA.SandboxID)}} {
			for range n {
				timed(k.samples, k.one)
			}
		}
	}
	b.StopTimer()
	var idle, idleA []time.Duration
	for range 40 {
		time.Sleep(idleGap) // think time, not synchronisation
		timed(&idle, viaPath(sb.SandboxID))
		time.Sleep(idleGap)
		timed(&idleA, viaPath(sbA.SandboxID))
	}
	d, p := p50(direct), p50(path)
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(p, "path-p50-ms")
	b.ReportMetric(p50(pathA), "attach-path-p50-ms")
	b.ReportMetric(p50(backend), "backend-p50-ms")
	b.ReportMetric(p50(backendA), "attach-backend-p50-ms")
	b.ReportMetric(p50(idle), "path-idle-p50-ms")
	b.ReportMetric(p50(idleA), "attach-path-idle-p50-ms")
	b.ReportMetric(d/p, "speedup")
}

// BenchmarkAgentThroughput: execs of `true` per second with 8 concurrent
// clients, through the whole path (one sandbox each) on the socket channel
// (path-execs/s) and on the attach stream (attach-path-execs/s), each the
// mean of two 3 s windows taken in turn, and directly on the Engine API.
func BenchmarkAgentThroughput(b *testing.B) {
	const clients = 8
	const window = 3 * time.Second
	env, be, cli := pathEnv(b, Config{})
	ctx := context.Background()
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = env.Create(ctx).SandboxID
	}
	be.attachOnly.Store(true)
	idsA := make([]string, clients)
	for i := range idsA {
		idsA[i] = env.Create(ctx).SandboxID
	}
	be.attachOnly.Store(false)
	measure := func(one func(i int) error) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(window)
		start := time.Now()
		for i := 0; i < clients; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if err := one(i); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	viaPath := func(ids []string) func(i int) error {
		return func(i int) error {
			res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: ids[i], Cmd: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	for i := 0; i < b.N; i++ {
		// The two channels in turn, twice: A B B A.
		path := measure(viaPath(ids))
		pathA := measure(viaPath(idsA))
		pathA = (pathA + measure(viaPath(idsA))) / 2
		path = (path + measure(viaPath(ids))) / 2
		direct := measure(func(i int) error {
			return directExec(ctx, cli, be.lookupCached(ids[i]).containerID, []string{"true"}, io.Discard)
		})
		b.ReportMetric(path, "path-execs/s")
		b.ReportMetric(pathA, "attach-path-execs/s")
		b.ReportMetric(direct, "direct-execs/s")
	}
}

// BenchmarkAgentTTI: time to interactive with a warm pool (create reply,
// then the first exec's reply), through the whole path. Each create waits for
// the pool to be full again: with one member idle and the previous claim's
// refill still starting a container, the figure would be that container
// start's share of the host's CPU (tti-busy-p50-ms reports that case).
func BenchmarkAgentTTI(b *testing.B) {
	const size = 2
	env, be, _ := pathEnv(b, Config{Pools: []PoolConfig{{Class: "standard", Image: baseImage, Size: size}}})
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	busy := make([]time.Duration, 0, b.N)
	creates := make([]time.Duration, 0, b.N)
	firsts := make([]time.Duration, 0, b.N)
	tti := func(samples *[]time.Duration) {
		start := time.Now()
		sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
		if err != nil {
			b.Fatal(err)
		}
		created := time.Now()
		if res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		*samples = append(*samples, time.Since(start))
		if samples != &busy {
			creates = append(creates, created.Sub(start))
			firsts = append(firsts, time.Since(created))
		}
		if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		eventually(b, 60*time.Second, "a full warm pool", func() bool { return be.PoolIdle()["standard"] == size })
		tti(&samples)
		tti(&busy) // the pool refilling meanwhile
	}
	b.StopTimer()
	b.ReportMetric(p50(samples), "tti-p50-ms")
	b.ReportMetric(p50(busy), "tti-busy-p50-ms")
	// Its two halves, the warm case: the create's reply, the first exec's.
	b.ReportMetric(p50(creates), "create-p50-ms")
	b.ReportMetric(p50(firsts), "first-exec-p50-ms")
}

// BenchmarkAgentStream: 64 MiB of output through the agent (Backend.Exec,
// and the whole path to a Go client), on the socket channel and on the
// attach stream (attach-*), vs a direct Engine exec's attach stream; and the
// agent's idle RSS. Two writers: busybox head, which writes 4 KiB at a
// time and alone reaches only about 285 MB/s in a sandbox here (to
// /dev/null), so that it measures itself as much as the relays; and dd
// writing 64 KiB blocks, which reaches GB/s, so that the relays are what is
// measured.
func BenchmarkAgentStream(b *testing.B) {
	const size = 64 << 20
	for _, w := range []struct {
		name string
		cmd  []string
	}{
		{"head", []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}},
		{"dd-64k", []string{"dd", "if=/dev/zero", "bs=65536", "count=" + strconv.Itoa(size/65536), "status=none"}},
	} {
		b.Run(w.name, func(b *testing.B) { benchAgentStream(b, size, w.cmd) })
	}
}

func benchAgentStream(b *testing.B, size int64, cmd []string) {
	env, be, cli := pathEnv(b, Config{})
	ctx := context.Background()
	sb := env.Create(ctx)
	be.attachOnly.Store(true)
	sbA := env.Create(ctx)
	be.attachOnly.Store(false)
	cid := be.lookupCached(sb.SandboxID).containerID
	var direct, agent, agentA, path, pathA time.Duration
	viaBackend := func(id string, d *time.Duration) {
		start := time.Now()
		var sw sizeWriter
		sw.w = io.Discard
		if st, err := be.Exec(ctx, id, worker.Process{Cmd: cmd, Stdout: &sw}); err != nil || st.Code != 0 || sw.n != size {
			b.Fatal(st, err, sw.n)
		}
		*d += time.Since(start)
	}
	viaPath := func(id string, d *time.Duration) {
		start := time.Now()
		p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: cmd})
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
		*d += time.Since(start)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		var cw countWriter
		if err := directExec(ctx, cli, cid, cmd, &cw); err != nil || int64(cw) != size {
			b.Fatal(cw, err)
		}
		direct += time.Since(start)
		viaBackend(sb.SandboxID, &agent)
		viaBackend(sbA.SandboxID, &agentA)
		viaPath(sb.SandboxID, &path)
		viaPath(sbA.SandboxID, &pathA)
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(direct), "direct-MB/s")
	b.ReportMetric(mbps(agent), "agent-MB/s")
	b.ReportMetric(mbps(agentA), "attach-agent-MB/s")
	b.ReportMetric(mbps(path), "path-MB/s")
	b.ReportMetric(mbps(pathA), "attach-path-MB/s")
	b.ReportMetric(mbps(agent)/mbps(direct), "agent/direct")
	pid := be.lookupCached(sb.SandboxID).agentOf().Hello().PID
	var out bytes.Buffer
	if _, err := be.Exec(ctx, sb.SandboxID, worker.Process{Cmd: []string{"sh", "-c", "sleep 1; grep VmRSS /proc/" + strconv.Itoa(pid) + "/status"}, Stdout: &out}); err == nil {
		if f := strings.Fields(out.String()); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			b.ReportMetric(kb/1024, "agent-rss-MiB")
		}
	}
}

// BenchmarkAgentChannelCPU: the host CPU each agent channel costs per exec
// of `true` (8 clients, whole path, 3 s windows: socket, attach, socket,
// attach), from /proc of dockerd, containerd and the shims, and of the test
// process (client, router, server, worker). Each window's figures are
// logged (-test.v); the last pair is reported.
func BenchmarkAgentChannelCPU(b *testing.B) {
	const clients, window = 8, 3 * time.Second
	env, be, _ := pathEnv(b, Config{})
	ctx := context.Background()
	create := func(attach bool) []string {
		be.attachOnly.Store(attach)
		defer be.attachOnly.Store(false)
		ids := make([]string, clients)
		for i := range ids {
			ids[i] = env.Create(ctx).SandboxID
		}
		return ids
	}
	sock, att := create(false), create(true)
	self := strconv.Itoa(os.Getpid())
	daemon := func(comm string) bool { return comm == "dockerd" }
	shims := func(comm string) bool { return comm == "containerd" || strings.HasPrefix(comm, "containerd-shim") }
	for i := 0; i < b.N; i++ {
		for _, k := range []struct {
			name string
			ids  []string
		}{{"socket", sock}, {"attach", att}, {"socket", sock}, {"attach", att}} {
			d0, s0, m0 := hostCPU(daemon, ""), hostCPU(shims, ""), hostCPU(nil, self)
			var n atomic.Int64
			var wg sync.WaitGroup
			deadline := time.Now().Add(window)
			start := time.Now()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: k.ids[c], Cmd: []string{"true"}}); err != nil {
							b.Error(err)
							return
						}
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			rate := float64(n.Load()) / time.Since(start).Seconds()
			per := func(x float64) float64 { return x / float64(n.Load()) * 1000 }
			d, s, m := per(hostCPU(daemon, "")-d0), per(hostCPU(shims, "")-s0), per(hostCPU(nil, self)-m0)
			b.Logf("%s: %.0f execs/s; CPU ms per exec: dockerd %.3f, containerd and shims %.3f, test process %.3f", k.name, rate, d, s, m)
			pre := ""
			if k.name == "attach" {
				pre = "attach-"
			}
			b.ReportMetric(rate, pre+"execs/s")
			b.ReportMetric(d, pre+"dockerd-ms/exec")
			b.ReportMetric(s, pre+"shims-ms/exec")
			b.ReportMetric(m, pre+"self-ms/exec")
		}
	}
}

// hostCPU is the user and system CPU seconds of the host's processes whose
// comm match says (or of the one process pid).
func hostCPU(match func(comm string) bool, pid string) float64 {
	var pids []string
	if pid != "" {
		pids = []string{pid}
	} else {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			if comm, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && match(strings.TrimSpace(string(comm))) {
				pids = append(pids, e.Name())
			}
		}
	}
	var tot float64
	for _, p := range pids {
		st, err := os.ReadFile("/proc/" + p + "/stat")
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if err != nil || i < 0 {
			continue
		}
		// The fields after the command's ")" start at the third, state:
		// utime and stime are the 14th and 15th.
		if f := strings.Fields(s[i+1:]); len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			tot += (u + k) / 100 // USER_HZ
		}
	}
	return tot
}
