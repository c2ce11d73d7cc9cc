//go:build integration

package dockerworker

import (
	"context"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxio/sandboxio/pkg/worker"
)

// reportP50 adds the median of the samples to the benchmark's output.
func reportP50(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkExecDirect is the baseline: `true` exec'd on the raw Engine API
// (create, attach, demultiplex, inspect) in a sandbox made by the backend.
func BenchmarkExecDirect(b *testing.B) {
	be := newTestBackend(b, Config{})
	id := mustCreate(b, be)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	cid := be.lookupCached(id).containerID
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ec, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		hj, err := cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader); err != nil {
			b.Fatal(err)
		}
		hj.Close()
		if ins, err := cli.ContainerExecInspect(ctx, ec.ID); err != nil || ins.ExitCode != 0 {
			b.Fatal(ins, err)
		}
		samples = append(samples, time.Since(start))
	}
	reportP50(b, samples)
}

// BenchmarkExecBackend is the same exec through Backend.Exec.
func BenchmarkExecBackend(b *testing.B) {
	be := newTestBackend(b, Config{})
	id := mustCreate(b, be)
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		st, err := be.Exec(ctx, id, worker.Process{ID: "p-bench", Cmd: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
		samples = append(samples, time.Since(start))
	}
	reportP50(b, samples)
}

// benchCreate measures create-to-first-exec (the exec included), the kill
// excluded.
func benchCreate(b *testing.B, be *Backend, wait func()) {
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		wait()
		spec := newSpec()
		b.StartTimer()
		start := time.Now()
		if _, err := be.Create(ctx, spec); err != nil {
			b.Fatal(err)
		}
		if st, err := be.Exec(ctx, spec.SandboxID, worker.Process{Cmd: []string{"true"}}); err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
		samples = append(samples, time.Since(start))
		b.StopTimer()
		if err := be.Kill(ctx, spec.SandboxID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50(b, samples)
}

func BenchmarkCreateCold(b *testing.B) {
	be := newTestBackend(b, Config{})
	benchCreate(b, be, func() {})
}

func BenchmarkCreateWarm(b *testing.B) {
	be := newTestBackend(b, Config{Pools: []PoolConfig{{Class: "base", Image: baseImage, Size: 2}}})
	benchCreate(b, be, func() {
		eventually(b, 60*time.Second, "pool member", func() bool { return be.PoolIdle()["base"] > 0 })
	})
}
