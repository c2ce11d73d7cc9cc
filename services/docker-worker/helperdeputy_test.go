//go:build integration

package dockerworker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestDeadlineHelperIsNotTheImageShell: the deadline set_timeout saves for
// the janitor is written and read by the worker's static helper, never by
// the image's /bin/sh or /bin/cat run as root (issue 14). The image here
// replaces busybox with a program that leaves a mark when it runs; before
// the fix the save ran it as root and the read got nothing back.
func TestDeadlineHelperIsNotTheImageShell(t *testing.T) {
	t.Parallel()
	needDocker(t)
	dir := t.TempDir()
	buildStatic(t, dir, "trojan", "package main\nimport (\"os\"; \"strconv\")\nfunc main() { _ = os.WriteFile(\"/tmp/trojan-ran\", []byte(strconv.Itoa(os.Getuid())), 0o666) }\n")
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+baseImage+"\nCOPY trojan /bin/sh\nCOPY trojan /bin/cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := "sbxtest-trojan:" + randID("t")
	if out, err := exec.Command("docker", "build", "-q", "-t", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img).Run() })
	b := newTestBackend(t, Config{Images: []string{"sbxtest-trojan"}})
	spec := newSpec(withImage(img))
	mustCreateSpec(t, b, spec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadline := time.Now().Add(7 * time.Minute).UTC().Truncate(time.Second)
	if err := b.SetTimeout(ctx, spec.SandboxID, deadline); err != nil {
		t.Fatal(err)
	}
	sb, err := b.lookup(ctx, spec.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	summary := container.Summary{ID: sb.containerID, State: "running", Labels: map[string]string{LabelSandbox: spec.SandboxID}}
	eventually(t, 20*time.Second, "the saved deadline read back", func() bool {
		got, ok := b.savedDeadline(ctx, summary)
		return ok && got.Equal(deadline)
	})
	var mark bytes.Buffer
	_, err = b.ReadFile(ctx, spec.SandboxID, "/tmp/trojan-ran", &mark)
	var ee *events.Error
	if !errors.As(err, &ee) || ee.Code != events.CodeFileNotFound {
		t.Fatalf("the image's /bin/sh or /bin/cat ran (as uid %q): %v", mark.String(), err)
	}
}
