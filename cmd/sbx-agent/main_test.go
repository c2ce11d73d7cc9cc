package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestMain runs the agent itself when asked to by TestServeOutlivesItsStdin.
func TestMain(m *testing.M) {
	if os.Getenv("SBX_AGENT_TEST_SERVE") == "1" {
		os.Args = []string{"sbx-agent", "serve"}
		main()
		return
	}
	os.Exit(m.Run())
}

// TestServeOutlivesItsStdin: an agent whose stdin ends with no process
// running keeps the sandbox alive (the worker falls back to Docker exec).
// With every goroutine parked on a channel, the runtime would call it a
// deadlock and exit, and the container with it.
func TestServeOutlivesItsStdin(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SBX_AGENT_TEST_SERVE=1")
	cmd.Dir = t.TempDir()
	out, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out // stdin: /dev/null, ended at once
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("the agent exited (%v) once its stdin ended:\n%s", err, b)
	case <-time.After(2 * time.Second): // it must still be serving
	}
	_ = cmd.Process.Kill()
	<-exited
}
