package proctree

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// start runs a shell in a session of its own that starts a child in its
// group and a daemonised one in a new session (found by its mark only), and
// returns the shell's pid and the children's.
func start(t *testing.T, mark string) (int, []int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `sleep 300 & a=$!; setsid sleep 300 & b=$!; echo "$a $b"; wait`)
	cmd.Env = append(os.Environ(), EnvMark+"="+mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, f := range strings.Fields(line) {
		n, _ := strconv.Atoi(f)
		kids = append(kids, n)
	}
	t.Cleanup(func() { KillMarked(mark, Scope{}) })
	return cmd.Process.Pid, kids
}

func alive(pid int) bool {
	_, ok := readStat(pid)
	return ok
}

func TestKill(t *testing.T) {
	tests := []struct {
		name string
		kill func(leader int, mark string)
	}{
		{"tree", func(leader int, mark string) { Kill(leader, mark, Scope{}) }},
		{"marked", func(_ int, mark string) {
			if n := KillMarked(mark, Scope{}); n < 3 {
				t.Errorf("KillMarked killed %d, want the 3", n)
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mark := "proctree-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
			leader, kids := start(t, mark)
			if got := Tree(leader, mark, Scope{}); len(got) < 3 {
				t.Fatalf("tree %v, want the shell and its 2 children", got)
			}
			// A scope that keeps nothing finds nothing.
			if got := Tree(leader, mark, Scope{Keep: func(int) bool { return false }}); len(got) != 0 {
				t.Fatalf("tree with nothing kept: %v", got)
			}
			tc.kill(leader, mark)
			for _, p := range append([]int{leader}, kids...) {
				poll.Eventually(t, 5*time.Second, func() error {
					if alive(p) {
						return os.ErrExist
					}
					return nil
				})
			}
		})
	}
}
