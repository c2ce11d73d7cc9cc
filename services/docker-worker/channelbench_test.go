//go:build integration

package dockerworker

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// BenchmarkAgentChannel measures the two channel candidates of ADR 0014 side
// by side on the same host: the container's attach stream (what the backend
// uses) and a unix socket in a bind-mounted host directory, each carrying
// the same protocol to the same agent binary: ping round trip, exec of
// `true`, and 64 MiB of output.
func BenchmarkAgentChannel(b *testing.B) {
	be := newTestBackend(b, Config{})
	ctx := context.Background()
	id := mustCreate(b, be)
	attach := be.lookupCached(id).agentOf()

	dir := b.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	name := "sbx-chanbench-" + randID("")
	cfg := &container.Config{Image: baseImage, User: "1000:1000", Entrypoint: []string{agentPath, "serve", "--listen", "/.sbx/run/agent.sock"},
		Labels: map[string]string{LabelWorker: be.cfg.WorkerID}, NetworkDisabled: true}
	hc := &container.HostConfig{NetworkMode: "none", Init: new(bool), CapDrop: []string{"ALL"}, Mounts: []mount.Mount{
		{Type: mount.TypeBind, Source: be.agentBin(), Target: agentPath, ReadOnly: true},
		{Type: mount.TypeBind, Source: dir, Target: "/.sbx/run"}}}
	*hc.Init = true
	c, err := be.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.removeContainer(context.Background(), c.ID) })
	if err := be.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	var conn *net.UnixConn
	eventually(b, 10*time.Second, "agent socket", func() bool {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		conn = uc
		return err == nil
	})
	unix, err := agent.Dial(ctx, conn, agent.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close() })

	for _, ch := range []struct {
		name string
		c    *agent.Client
	}{{"attach", attach}, {"unix", unix}} {
		b.Run(ch.name, func(b *testing.B) {
			pings := make([]time.Duration, 0, b.N)
			execs := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := ch.c.Ping(ctx); err != nil {
					b.Fatal(err)
				}
				pings = append(pings, time.Since(start))
				start = time.Now()
				if ex, err := ch.c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}}); err != nil || ex.Code != 0 {
					b.Fatal(ex, err)
				}
				execs = append(execs, time.Since(start))
			}
			const size = 64 << 20
			start := time.Now()
			var sw sizeWriter
			sw.w = io.Discard
			if ex, err := ch.c.Exec(ctx, agent.ExecRequest{Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"},
				Stdout: &sw}); err != nil || ex.Code != 0 || sw.n != size {
				b.Fatal(ex, err, sw.n)
			}
			b.ReportMetric(p50(pings), "ping-p50-ms")
			b.ReportMetric(p50(execs), "exec-p50-ms")
			b.ReportMetric(float64(size)/time.Since(start).Seconds()/1e6, "stream-MB/s")
		})
	}
	_ = worker.Process{}
}
