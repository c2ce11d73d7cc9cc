package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// An agent that dies of a fatal crash leaves the report in its crash file,
// where the worker can read why its sandbox ended (issue 22, A.1). Not PID 1
// here, the agent crashes on SIGQUIT as any Go program.
func TestServeWritesItsCrash(t *testing.T) {
	crash := filepath.Join(t.TempDir(), "crash")
	a := startServing(t, false, "SBX_AGENT_TEST_CRASH_FILE="+crash)
	hello(t, a.in, a.out)
	pid, err := strconv.Atoi(a.pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 20*time.Second, func() error {
		b, _ := os.ReadFile(crash)
		if strings.Contains(string(b), "SIGQUIT") && strings.Contains(string(b), "goroutine ") {
			return nil
		}
		return fmt.Errorf("crash file: %q", b)
	})
}
