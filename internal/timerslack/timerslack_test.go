package timerslack

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// report is what the test binary prints when run as the child.
type report struct {
	Orig    int      `json:"orig"`
	Threads []int    `json:"threads"`
	Started int      `json:"started"` // a process started through Start
	After   []int    `json:"after"`   // the threads' slack after that
	Env     string   `json:"env"`
	Errs    []string `json:"errs"`
}

func TestMain(m *testing.M) {
	if os.Getenv("TIMERSLACK_TEST_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child relaxes, then reports its threads' slack and a started process's.
func child() {
	var r report
	r.Orig = Relax()
	r.Env = os.Getenv(Env)
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		r.Threads = append(r.Threads, readSlack("/proc/"+t.Name()+"/timerslack_ns", &r.Errs))
	}
	cmd := exec.Command("cat", "/proc/self/timerslack_ns")
	var out strings.Builder
	cmd.Stdout = &out
	if err := Start(cmd.Start); err != nil {
		r.Errs = append(r.Errs, err.Error())
	} else if err := cmd.Wait(); err != nil {
		r.Errs = append(r.Errs, err.Error())
	}
	r.Started, _ = strconv.Atoi(strings.TrimSpace(out.String()))
	tasks, _ = os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		r.After = append(r.After, readSlack("/proc/"+t.Name()+"/timerslack_ns", &r.Errs))
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func readSlack(p string, errs *[]string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		*errs = append(*errs, err.Error())
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func runChild(t *testing.T, env ...string) report {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "TIMERSLACK_TEST_CHILD=1"), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil || len(r.Errs) > 0 {
		t.Fatalf("child's report %q: %v %v", out, err, r.Errs)
	}
	return r
}

// TestRelax: every thread of a relaxed process has Relaxed's slack, before
// and after it starts a process, the process it starts has the one it was
// started with, and the marker is not passed on.
func TestRelax(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/timerslack_ns"); err != nil {
		t.Skip("no timerslack_ns:", err)
	}
	mine, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || mine >= int(Relaxed) {
		t.Skipf("this process's slack is %d (%v)", mine, err)
	}
	r := runChild(t)
	if r.Orig != mine || r.Started != mine || r.Env != "" || len(r.Threads) < 2 {
		t.Fatalf("report %+v, want orig and started %d, no %s", r, mine, Env)
	}
	for i, s := range append(r.Threads, r.After...) {
		if s != int(Relaxed) {
			t.Fatalf("thread %d of %d before and %d after a start: slack %d, want %d", i, len(r.Threads), len(r.After), s, int(Relaxed))
		}
	}
}

// TestRelaxLeavesAForeignEnv: the marker's variable in a process that did
// not set it (a user's variable of that name, another process's marker)
// relaxes nothing and stays where it was.
func TestRelaxLeavesAForeignEnv(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/timerslack_ns"); err != nil {
		t.Skip("no timerslack_ns:", err)
	}
	for _, v := range []string{"12345", "50000:1", "x"} {
		r := runChild(t, Env+"="+v)
		if r.Orig != 0 || r.Env != v {
			t.Fatalf("%s=%s: report %+v: want orig 0 and the variable kept", Env, v, r)
		}
		for _, s := range r.Threads {
			if s == int(Relaxed) {
				t.Fatalf("%s=%s: a thread was relaxed: %+v", Env, v, r)
			}
		}
	}
}
