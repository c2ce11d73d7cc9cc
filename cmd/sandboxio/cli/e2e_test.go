package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/timerslack"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type result struct {
	code           int
	stdout, stderr string
}

func cli(t *testing.T, url string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, "sandboxio", append([]string{"--nats", url, "--log-level", "error"}, args...), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// TestDevEndToEnd runs `sandboxio dev` and drives it with the client
// commands, as a user would.
func TestDevEndToEnd(t *testing.T) {
	dev := startDev(t, "--backends", "fake")
	url, dataDir := dev.URL, dev.DataDir
	dev.waitLive(t, "fake", "")

	if r := cli(t, url, "run", "--class", "fake", "--", "interleave", "2"); r.code != 0 || r.stdout != "out 1\nout 2\n" || !strings.Contains(r.stderr, "err 2") {
		t.Fatalf("run: %+v", r)
	}
	if r := cli(t, url, "run", "--class", "fake", "--", "exit", "7"); r.code != 7 {
		t.Fatalf("run exit 7: %+v", r)
	}
	r := cli(t, url, "create", "--class", "fake", "--timeout", "60", "--metadata", "team=a")
	var created struct {
		SandboxID string `json:"sandbox_id"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil || created.SandboxID == "" {
		t.Fatalf("create: %+v", r)
	}
	id := created.SandboxID
	if r := cli(t, url, "exec", id, "--", "echo", "hi"); r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("exec: %+v", r)
	}
	if r := cli(t, url, "exec", "--buffered", id, "--", "exit", "3"); r.code != 3 {
		t.Fatalf("exec --buffered exit 3: %+v", r)
	}
	if r := cli(t, url, "ls", "--metadata", "team=a"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("ls: %+v", r)
	}
	if r := cli(t, url, "kill", id); r.code != 0 || strings.TrimSpace(r.stdout) != id+" gone" {
		t.Fatalf("kill: %+v", r)
	}
	if r := cli(t, url, "kill", id); r.code != 0 || !strings.Contains(r.stdout, "already gone") {
		t.Fatalf("second kill: %+v", r)
	}
	if r := cli(t, url, "exec", id, "--", "echo"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1204") {
		t.Fatalf("exec after kill: %+v", r)
	}
	if r := cli(t, url, "create", "--class", "fake", "--timeout", "0"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1004") {
		t.Fatalf("create without lifetime: %+v", r)
	}
	if r := cli(t, url, "create", "--class", "nope"); r.code != exitSBXError || !strings.Contains(r.stderr, "SBX_E1101") {
		t.Fatalf("create of unknown class: %+v", r)
	}
	if r := cli(t, url, "reap", "--dry-run"); r.code != 0 {
		t.Fatalf("reap --dry-run: %+v", r)
	}
	// The auditor writes every record; the chain verifies. Each operation
	// above (3 creates, 4 execs, 3 kills) has an opened and a closed record.
	logPath := filepath.Join(dataDir, "audit.jsonl")
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := cli(t, url, "audit", "verify", "--open-tail", logPath) // the auditor is still writing it
		if r.code == 0 && strings.Contains(r.stdout, "chain intact") && !strings.HasPrefix(r.stdout, "0 lines") {
			lines := strings.Fields(r.stdout)[0]
			if n, _ := strconv.Atoi(lines); n >= 20 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log never complete: %+v", r)
		}
		time.Sleep(50 * time.Millisecond) // polling the auditor, with a deadline
	}
	if r := cli(t, url, "audit", "tail", "--last", "2"); r.code != 0 || r.stdout == "" {
		t.Fatalf("audit tail: %+v", r)
	}
}

// TestDevShutsDownOnSIGTERM runs the real binary and stops it with a signal.
func TestDevShutsDownOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sandboxio")
	build := exec.Command("go", "build", "-o", bin, "github.com/sandboxio/sandboxio/cmd/sandboxio")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "dev", "--listen", addr, "--data-dir", t.TempDir(), "--backends", "fake")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for cli(t, "nats://"+addr, "backends").code != 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("dev did not come up:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond) // polling start-up, with a deadline
	}
	if r := cli(t, "nats://"+addr, "run", "--class", "fake", "--", "echo", "via", "binary"); r.stdout != "via binary\n" {
		t.Fatalf("run against the binary: %+v", r)
	}
	checkRelaxed(t, cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev exited with %v after SIGTERM:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("dev ignored SIGTERM:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "shutting down") {
		t.Fatalf("no clean shutdown in the log:\n%s", out.String())
	}
	_ = os.Remove(bin)
}

// checkRelaxed: a server role run as the program executed itself once so
// that every thread has timerslack.Relaxed's slack (ADR 28), and kept its
// pid, so that a signal still reaches it.
func checkRelaxed(t *testing.T, pid int) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	want := strconv.Itoa(int(timerslack.Relaxed))
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
		if err != nil {
			t.Skip("no timerslack_ns:", err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Fatalf("dev's thread %s has a timer slack of %s ns, want %s", task.Name(), got, want)
		}
	}
}
