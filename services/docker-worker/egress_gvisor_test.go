//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// TestEgressGVisorNetstack proves the egress machinery on gVisor's own
// network stack (runsc --network=sandbox) outside Docker: it runs runsc
// directly (OCI bundle) in a network namespace wired to a sandbox network
// the worker made, and checks the same things as for runc. It uses the
// daemon's runsc-net binary, or SBX_TEST_RUNSC.
//
// It passes with the runsc build deploy/images/gvisor.sh installs here
// (go branch, 2026-09-05): the same rules, resolver and proxy hold for
// gVisor's own stack. The worker runs such sandboxes on that build as the
// runtime runsc-net (TestEgressGVisor).
func TestEgressGVisorNetstack(t *testing.T) {
	t.Parallel()
	r := newEgressRig(t, Config{})
	runsc := os.Getenv("SBX_TEST_RUNSC")
	if runsc == "" {
		// The binary the daemon has registered with its own network stack,
		// if any (Debian's 2022 runsc cannot run one here).
		info, err := r.b.cli.Info(context.Background())
		if rt, ok := info.Runtimes[RuntimeRunscNet]; err == nil && ok && filepath.IsAbs(rt.Path) {
			runsc = rt.Path
		}
	}
	if runsc == "" {
		t.Skip("no runsc with its own network stack: SBX_RUNSC_BUILD=1 deploy/images/gvisor.sh registers " + RuntimeRunscNet + ", or set SBX_TEST_RUNSC")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := randID("gv-")
	pol, err := egress.Parse(events.NetworkPolicy{Egress: events.EgressAllow, Allow: []string{"allowed.test"}}, egress.Limits{}, r.b.egress.mgr.Never())
	if err != nil {
		t.Fatal(err)
	}
	att, err := r.b.egress.mgr.Attach(ctx, id, pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.b.egress.mgr.Detach(context.Background(), id) })

	// The namespace Docker would make: a veth on the sandbox's bridge.
	ns, tag := "sbxgv-"+egress.Key(id), egress.Key(id)
	hostIf, nsIf := "sbxgh"+tag, "sbxgn"+tag
	cmd(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	cmd(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	cmd(t, "ip", "link", "set", hostIf, "master", egress.BridgePrefix(r.b.cfg.WorkerID)+egress.Key(id), "up")
	cmd(t, "ip", "link", "set", nsIf, "netns", ns)
	cmd(t, "ip", "-n", ns, "link", "set", nsIf, "name", "eth0")
	nsIf = "eth0"
	addr := att.Gateway.Next().Next() // .3: Docker's IPAM would hand out .2
	cmd(t, "ip", "-n", ns, "addr", "add", addr.String()+"/29", "dev", nsIf)
	cmd(t, "ip", "-n", ns, "link", "set", nsIf, "up")
	cmd(t, "ip", "-n", ns, "link", "set", "lo", "up")
	cmd(t, "ip", "-n", ns, "route", "add", "default", "via", att.Gateway.String())

	dir := t.TempDir()
	t.Cleanup(func() { // runsc leaves a bind mount of its null netns under its root
		mounts, _ := os.ReadFile("/proc/mounts")
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				_ = exec.Command("umount", f[1]).Run()
			}
		}
	})
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", fmt.Sprintf(
		"c=$(docker create --label %s=%s %s) && docker export $c | tar -x -C %s; s=$?; docker rm $c >/dev/null; exit $s",
		LabelWorker, r.b.cfg.WorkerID, baseImage, rootfs)).CombinedOutput()
	if err != nil {
		t.Fatalf("rootfs: %v %s", err, out)
	}
	run := func(script string) string {
		t.Helper()
		// runsc takes the interface's addresses and routes into its netstack
		// and leaves the namespace without them: give them back each time,
		// as Docker gives each container a fresh namespace.
		cmd(t, "ip", "-n", ns, "addr", "replace", addr.String()+"/29", "dev", nsIf)
		cmd(t, "ip", "-n", ns, "route", "replace", "default", "via", att.Gateway.String())
		spec := map[string]any{
			"ociVersion": "1.0.0",
			"process": map[string]any{"args": []string{"sh", "-c", script}, "cwd": "/", "user": map[string]any{"uid": 1000, "gid": 1000},
				"env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
			"root":     map[string]any{"path": rootfs, "readonly": true},
			"hostname": "sandbox",
			"mounts": []map[string]any{
				{"destination": "/proc", "type": "proc", "source": "proc"},
				{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
				{"destination": "/etc/resolv.conf", "type": "bind", "source": att.ResolvConf, "options": []string{"rbind", "ro"}},
			},
			"linux": map[string]any{"namespaces": []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
				{"type": "network", "path": "/run/netns/" + ns}}},
		}
		b, _ := json.Marshal(spec)
		bundle := t.TempDir()
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		c := exec.CommandContext(ctx, runsc, "--root", filepath.Join(dir, "state"), "--network=sandbox", "run", "--bundle", bundle, randID("gv"))
		var buf bytes.Buffer
		c.Stdout, c.Stderr = &buf, &buf
		_ = c.Run()
		return strings.TrimSpace(buf.String())
	}
	ip := r.inet.ip.String()
	checks := []struct{ name, script, want, never string }{
		{"gVisor kernel", "dmesg | head -1", "gVisor", ""},
		{"listed name", httpGet("allowed.test", "allowed.test"), "hello allowed.test", ""},
		{"other name", httpGet("other.test", ip), "403 Forbidden", "hello"},
		{"raw address", "echo hi | nc -w 3 " + ip + " 80; echo rc=$?", "rc=", "hello"},
		{"host listener via the gateway", fmt.Sprintf("nc -w 2 %s %d </dev/null; echo rc=$?", att.Gateway, r.host.port), "rc=", "secret"},
		{"dns of another name", "nslookup other.test 2>&1; echo rc=$?", "rc=", ip},
	}
	for _, c := range checks {
		got := run(c.script)
		t.Logf("%s: %s", c.name, got)
		if !strings.Contains(got, c.want) || (c.never != "" && strings.Contains(got, c.never)) {
			t.Errorf("runsc netstack, %s: %q, want %q", c.name, got, c.want)
		}
	}
	if n := r.host.accepted.Load(); n != 0 {
		t.Errorf("host listener accepted %d", n)
	}
	cnt, _ := r.b.egress.mgr.SandboxStats(id)
	t.Logf("runsc --network=sandbox: counts %+v", cnt)
}
