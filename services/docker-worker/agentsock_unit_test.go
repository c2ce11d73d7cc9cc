package dockerworker

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// The janitor's sweep removes the socket directories no container names,
// once older than the grace, and nothing else.
func TestSweepSockDirs(t *testing.T) {
	base := t.TempDir()
	b := &Backend{cfg: Config{AgentSocketDir: base}, sockBase: base, log: slog.New(slog.DiscardHandler)}
	const live, orphan, young = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "00000000000000000000000000000000"
	for _, n := range []string{live, orphan, young, "not-ours"} {
		if err := os.Mkdir(filepath.Join(base, n), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{live, orphan, "not-ours"} {
		if err := os.Chtimes(filepath.Join(base, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	b.sweepSockDirs([]container.Summary{{Labels: map[string]string{LabelAgentSock: live}}}, sockDirGrace, time.Now())
	for n, want := range map[string]bool{live: true, orphan: false, young: true, "not-ours": true} {
		if _, err := os.Lstat(filepath.Join(base, n)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", n, err == nil, want)
		}
	}
}

// The base directory must be the worker's own and closed to others; a
// symlink in its place is refused.
func TestCheckSockBase(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := checkSockBase(open); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(open); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v after the check, want 0700", fi.Mode().Perm())
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	if err := checkSockBase(link); err == nil {
		t.Error("a symlink was taken as the socket directory")
	}
	if err := checkSockBase("relative/dir"); err == nil {
		t.Error("a relative path was taken")
	}
	if err := checkSockBase("/" + string(make([]byte, 100))); err == nil {
		t.Error("a path too long for a socket was taken")
	}
	for name, want := range map[string]bool{"0123456789abcdef0123456789abcdef": true, "0123456789ABCDEF0123456789abcdef": false,
		"../23456789abcdef0123456789abcdef": false, "": false} {
		if validSockName(name) != want {
			t.Errorf("validSockName(%q) = %v", name, !want)
		}
	}
}
