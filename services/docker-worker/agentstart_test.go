//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// buildStatic builds a static Go program from src into dir.
func buildStatic(t *testing.T, dir, name, src string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, filepath.Join(dir, name+".go"))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", name, err, b)
	}
	return out
}

// A sandbox whose agent does not start still works, through Docker exec, and
// its record says so.
func TestAgentDoesNotStart(t *testing.T) {
	t.Parallel()
	bin := buildStatic(t, t.TempDir(), "notagent", "package main\nfunc main() {}\n")
	b := newTestBackend(t, Config{AgentBinary: bin})
	spec := newSpec()
	out := mustCreateSpec(t, b, spec)
	if out.ExecPath != events.ExecPathDockerExec || !strings.Contains(out.ExecPathNote, "did not start") {
		t.Fatalf("exec path %q note %q", out.ExecPath, out.ExecPathNote)
	}
	if got := sh(t, b, spec.SandboxID, "echo ok"); got != "ok" {
		t.Fatalf("exec: %q", got)
	}
}

// An image with no shell, no libc, nothing but one static program: the
// agent runs execs and files in it.
func TestScratchImage(t *testing.T) {
	t.Parallel()
	needDocker(t)
	dir := t.TempDir()
	buildStatic(t, dir, "hello", "package main\nimport \"os\"\nfunc main() { os.Stdout.WriteString(\"hello from scratch \" + os.Args[1] + \"\\n\") }\n")
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY hello /hello\nWORKDIR /work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := "sbxtest-scratch:" + randID("t")
	if b, err := exec.Command("docker", "build", "-q", "-t", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img).Run() })
	b := newTestBackend(t, Config{Images: []string{"sbxtest-scratch"}})
	spec := newSpec(withImage(img))
	out := mustCreateSpec(t, b, spec)
	if out.ExecPath != events.ExecPathAgent {
		t.Fatalf("exec path %q (%s)", out.ExecPath, out.ExecPathNote)
	}
	r := run(t, b, spec.SandboxID, worker.Process{Cmd: []string{"/hello", "x"}})
	if r.stdout != "hello from scratch x\n" {
		t.Fatalf("exec: %+v", r)
	}
	ctx := context.Background()
	if err := b.WriteFile(ctx, spec.SandboxID, "note.txt", 0o644, strings.NewReader("no shell needed"), 15); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := b.ReadFile(ctx, spec.SandboxID, "/work/note.txt", &got); err != nil || got.String() != "no shell needed" {
		t.Fatalf("read: %q %v", got.String(), err)
	}
}

// A worker whose binary path is not on the daemon's host (a worker in a
// container) still creates sandboxes, without the agent from then on.
func TestAgentMountFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildStatic(t, dir, "gone", "package main\nfunc main() {}\n")
	b := newTestBackend(t, Config{AgentBinary: bin})
	if err := os.Remove(bin); err != nil { // as if it lived in another mount namespace
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		spec := newSpec()
		out := mustCreateSpec(t, b, spec)
		if out.ExecPath != events.ExecPathDockerExec || !strings.Contains(out.ExecPathNote, "mount") {
			t.Fatalf("create %d: exec path %q note %q", i, out.ExecPath, out.ExecPathNote)
		}
		if got := sh(t, b, spec.SandboxID, "echo ok"); got != "ok" {
			t.Fatalf("exec: %q", got)
		}
	}
	if b.agentBin() != "" {
		t.Fatal("the agent is still injected after the daemon could not mount it")
	}
}
