package dockerworker

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestPidfdSignalPinsTheProcess: a pidfd opened on a process signals that
// process, and after it has exited and been reaped the pidfd reaches
// nothing (ESRCH) instead of whatever took its pid.
func TestPidfdSignalPinsTheProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	pf := openPidfd(pid)
	defer pf.close()
	if pf < 0 {
		t.Skip("no pidfd_open on this kernel")
	}
	if err := pf.signal(pid, 0); err != nil {
		t.Fatalf("signal 0 to a live process: %v", err)
	}
	if err := pf.signal(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("SIGTERM through the pidfd did not end the process")
	}
	if err := pf.signal(pid, 0); err != syscall.ESRCH {
		t.Fatalf("signal through the pidfd of a reaped process: %v, want ESRCH", err)
	}
}
