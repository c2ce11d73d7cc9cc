package agent

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Package is the agent's import path, built when no binary is configured.
const Package = "github.com/sandboxio/sandboxio/cmd/sbx-agent"

var (
	buildMu   sync.Mutex
	buildDone = map[string]string{} // cache dir -> built binary
)

// Binary returns the path of a static sbx-agent binary: configured (checked
// to exist), else built once per process with the Go toolchain from the
// module the worker runs in (CGO_ENABLED=0, into cacheDir). The build makes
// `go build ./...` and `go test ./...` work from a clean clone with no
// generated file; a deployment without a toolchain configures the binary
// (`make sbx-agent` builds it) or runs without the agent.
func Binary(ctx context.Context, configured, cacheDir string) (string, error) {
	if configured != "" {
		fi, err := os.Stat(configured)
		if err != nil {
			return "", fmt.Errorf("agent binary: %w", err)
		}
		if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || !isStatic(configured) {
			return "", fmt.Errorf("agent binary %s is not a statically linked executable", configured)
		}
		return filepath.Abs(configured)
	}
	if exe, err := os.Executable(); err == nil {
		// `make build` puts a static sbx-agent beside the worker's binary.
		if p := filepath.Join(filepath.Dir(exe), "sbx-agent"); isStatic(p) {
			return p, nil
		}
	}
	if cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			d = os.TempDir()
		}
		cacheDir = filepath.Join(d, "sandboxio")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildDone[cacheDir]; ok {
		return p, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("agent binary: none configured and no Go toolchain to build one")
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	tmp, err := os.CreateTemp(cacheDir, "sbx-agent-*.tmp")
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp.Name(), Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("agent binary: go build %s: %w: %s", Package, err, truncate(out, 2000))
	}
	data, err := os.ReadFile(tmp.Name())
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	sum := sha256.Sum256(data)
	// Named by content: a running container's bind-mounted binary is never
	// replaced under it, and identical builds share one file.
	final := filepath.Join(cacheDir, "sbx-agent-"+hex.EncodeToString(sum[:8]))
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	buildDone[cacheDir] = final
	return final, nil
}

// isStatic reports whether p is an executable ELF file with no program
// interpreter (statically linked: it runs in an image with no libc).
func isStatic(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return false
	}
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
